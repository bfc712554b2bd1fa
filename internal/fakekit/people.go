package fakekit

import "strconv"

var (
	firstNames = []string{"Olivia", "Amelia", "Isla", "Ava", "Mia", "Ivy", "Lily", "Isabella", "Rosie", "Sophia",
		"Oliver", "George", "Noah", "Arthur", "Harry", "Leo", "Muhammad", "Jack", "Charlie", "Oscar",
		"Priya", "Aisha", "Chen", "Mateo", "Zofia", "Kwame", "Siobhan", "Ffion", "Hamish", "Ewan"}
	lastNames = []string{"Smith", "Jones", "Williams", "Taylor", "Brown", "Davies", "Evans", "Wilson", "Thomas", "Johnson",
		"Roberts", "Robinson", "Thompson", "Wright", "Walker", "White", "Edwards", "Hughes", "Green", "Hall",
		"Patel", "Khan", "Nowak", "O'Brien", "MacDonald", "Okafor", "García", "Kowalski", "Murphy", "Lewis"}
	emailDomains = []string{"example.com", "example.co.uk", "mail.example.org", "example.net"}
)

// Person returns a deterministic, realistic customer name and e-mail for x,
// so that tests can prove personal data never leaks into reports.
func Person(x uint64) (name, email string) {
	f := firstNames[x%uint64(len(firstNames))]
	x /= uint64(len(firstNames))
	l := lastNames[x%uint64(len(lastNames))]
	x /= uint64(len(lastNames))
	d := emailDomains[x%uint64(len(emailDomains))]
	x /= uint64(len(emailDomains))
	local := make([]byte, 0, 40)
	for _, part := range []string{f, ".", l} {
		for _, r := range part {
			switch {
			case r >= 'A' && r <= 'Z':
				local = append(local, byte(r+'a'-'A'))
			case r >= 'a' && r <= 'z' || r == '.':
				local = append(local, byte(r))
			case r == 'í':
				local = append(local, 'i')
			}
		}
	}
	local = strconv.AppendUint(local, x%1000, 10)
	local = append(local, '@')
	local = append(local, d...)
	return f + " " + l, string(local)
}

// SplitMix64 is the SplitMix64 mixer: the fakes' ids, request ids and
// generated data hash counters and seeds with it.
func SplitMix64(x uint64) uint64 {
	x += 0x9E3779B97F4A7C15
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9
	x = (x ^ (x >> 27)) * 0x94D049BB133111EB
	return x ^ (x >> 31)
}
