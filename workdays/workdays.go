// Package workdays counts UK (England and Wales) working days: days that are
// neither Saturday, Sunday nor an England and Wales bank holiday.
//
// Bacs Direct Debit stuck thresholds are configured in working days, so a
// payment submitted on a Friday is not reported stuck on the following Monday.
// All calendar arithmetic is done on the Europe/London calendar date of an
// instant.
//
// The bank holidays are computed from the rules (github.com/rickar/cal/v2/gb:
// New Year's Day, Good Friday, Easter Monday, the May, spring and summer bank
// holidays, Christmas and Boxing Day, with their substitute days), so no list
// runs out. One-off holidays proclaimed later than that library's release (a
// coronation, a jubilee) are not known to it: a list loaded with Load (the
// config key providers.gocardless.holidays_file) replaces the computed days
// for every year it names.
package workdays

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
	_ "time/tzdata" // Europe/London must resolve in a scratch container.
	"unicode"

	"github.com/rickar/cal/v2/gb"
)

// london is the Europe/London location all calendar dates are taken in.
var london = mustLoadLondon()

func mustLoadLondon() *time.Location {
	loc, err := time.LoadLocation("Europe/London")
	if err != nil {
		panic("workdays: loading Europe/London: " + err.Error())
	}
	return loc
}

// day is a civil date as a count of days since 1970-01-01 (proleptic Gregorian).
type day int64

func dayOf(y int, m time.Month, d int) day {
	return day(time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Unix() / 86400)
}

// date returns the year, month and day of d.
func (d day) date() (int, time.Month, int) {
	return time.Unix(int64(d)*86400, 0).UTC().Date()
}

func (d day) weekday() time.Weekday {
	// 1970-01-01 was a Thursday.
	return time.Weekday((int64(d)%7 + 7 + int64(time.Thursday)) % 7)
}

// londonDay returns t's calendar date in Europe/London.
func londonDay(t time.Time) day {
	y, m, d := t.In(london).Date()
	return dayOf(y, m, d)
}

// Calendar knows which days are working days: every Monday to Friday that is
// not a bank holiday. A Calendar is immutable and safe for concurrent use.
// The zero Calendar has no holidays (weekends only).
type Calendar struct {
	holidays    map[day]struct{} // a loaded list: these are the holidays of the years first..last
	first, last int
	rules       bool // other years' holidays are the England and Wales rules'
}

// englandAndWales is the computed calendar.
var englandAndWales = &Calendar{rules: true}

// EnglandAndWales returns the England and Wales calendar, computed from the
// rules for every year. The returned Calendar is shared and must be treated
// as read-only (it has no mutating methods).
func EnglandAndWales() *Calendar { return englandAndWales }

// ruleYears caches the computed holidays of a year (map[day]struct{}).
var ruleYears sync.Map

// ruleHolidays are the England and Wales bank holidays of year y: the day
// each is taken off (a substitute day when it falls on a weekend).
func ruleHolidays(y int) map[day]struct{} {
	if m, ok := ruleYears.Load(y); ok {
		return m.(map[day]struct{})
	}
	m := make(map[day]struct{}, len(gb.Holidays))
	for _, h := range gb.Holidays {
		if _, observed := h.Calc(y); !observed.IsZero() {
			yy, mm, dd := observed.Date()
			m[dayOf(yy, mm, dd)] = struct{}{}
		}
	}
	ruleYears.Store(y, m)
	return m
}

// Parse reads a holiday list. The calendar it returns has the listed
// holidays in the years from the list's first to its last, and the computed
// England and Wales holidays in other years, so that a list that ends does
// not turn the bank holidays after it into working days. One ISO date
// (2026-12-25) per line, optional text after whitespace or '#' (the
// holiday's name), blank lines and '#' comment lines ignored. Errors name the
// line number and the bad text. A list with no dates at all is an error, so
// an emptied file is not silently taken to mean "no bank holidays".
// Duplicate dates are allowed.
func Parse(r io.Reader) (*Calendar, error) {
	c := &Calendar{holidays: make(map[day]struct{}), rules: true}
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if line == 1 {
			text = strings.TrimPrefix(text, "\uFEFF") // tolerate a UTF-8 BOM
		}
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		field := text
		if i := strings.IndexFunc(text, func(r rune) bool { return r == '#' || unicode.IsSpace(r) }); i >= 0 {
			field = text[:i]
		}
		t, err := time.Parse(time.DateOnly, field)
		if err != nil {
			return nil, fmt.Errorf("workdays: line %d: %q is not an ISO date (YYYY-MM-DD)", line, text)
		}
		y, m, d := t.Date()
		c.holidays[dayOf(y, m, d)] = struct{}{}
		if len(c.holidays) == 1 || y < c.first {
			c.first = y
		}
		if y > c.last {
			c.last = y
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("workdays: reading holiday list after line %d: %w", line, err)
	}
	if len(c.holidays) == 0 {
		return nil, errors.New("workdays: holiday list has no dates")
	}
	return c, nil
}

// Load reads a holiday list from a file (a mounted ConfigMap can replace the
// computed holidays of the years it lists). The format is that of Parse; errors include the path.
func Load(path string) (*Calendar, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("workdays: %w", err)
	}
	defer f.Close()
	c, err := Parse(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Covers returns the first and last year of a loaded holiday list, the years
// in which the list replaces the computed holidays. It returns 0, 0 for
// EnglandAndWales (computed for every year) and for the zero Calendar.
func (c *Calendar) Covers() (first, last int) {
	return c.first, c.last
}

func (c *Calendar) working(d day) bool {
	switch d.weekday() {
	case time.Saturday, time.Sunday:
		return false
	}
	if y, _, _ := d.date(); c.holidays != nil && y >= c.first && y <= c.last {
		_, hol := c.holidays[d]
		return !hol
	} else if c.rules {
		_, hol := ruleHolidays(y)[d]
		return !hol
	}
	return true
}

// IsWorkingDay reports whether the calendar date of t in the Europe/London
// time zone is a working day.
func (c *Calendar) IsWorkingDay(t time.Time) bool {
	return c.working(londonDay(t))
}

// AddWorkingDays returns t moved by n working days (n may be negative),
// keeping the London wall-clock time of day; moving from a non-working day
// first counts the next (or previous, for negative n) working day as step one.
// n == 0 returns t unchanged. The result is in the Europe/London location.
func (c *Calendar) AddWorkingDays(t time.Time, n int) time.Time {
	if n == 0 {
		return t
	}
	lt := t.In(london)
	d := londonDay(lt)
	step := day(1)
	if n < 0 {
		step, n = -1, -n
	}
	for n > 0 {
		d += step
		if c.working(d) {
			n--
		}
	}
	return atClock(d, lt)
}

// atClock returns the London time on date d with the wall clock of lt. Working
// days never contain a UK clock change (always on a Sunday), so the wall time
// exists and is unambiguous whenever d is a working day.
func atClock(d day, lt time.Time) time.Time {
	y, m, dd := d.date()
	h, mi, s := lt.Clock()
	return time.Date(y, m, dd, h, mi, s, lt.Nanosecond(), london)
}

// WorkingDaysBetween counts working days d with from < d <= to (London
// calendar dates), 0 if to <= from.
func (c *Calendar) WorkingDaysBetween(from, to time.Time) int {
	if !to.After(from) {
		return 0
	}
	a, b := londonDay(from), londonDay(to)
	n := 0
	for d := a + 1; d <= b; d++ {
		if c.working(d) {
			n++
		}
	}
	return n
}

// Before returns the cutoff for "older than n working days as of now": a time
// stamped before it is at least n working days old. Used as:
// stuck if source_updated_at < cal.Before(now, n).
//
// Age is working time: only time on working days counts, by London wall clock.
// When now is on a working day the cutoff is the same London wall-clock time n
// working days earlier (AddWorkingDays(now, -n)); when now is on a weekend or
// bank holiday it is 00:00 London on the nth previous working day, since no
// working time has passed since the end of the last working day. n <= 0
// returns now.
func (c *Calendar) Before(now time.Time, n int) time.Time {
	if n <= 0 {
		return now
	}
	cut := c.AddWorkingDays(now, -n)
	if c.IsWorkingDay(now) {
		return cut
	}
	y, m, d := cut.Date()
	return time.Date(y, m, d, 0, 0, 0, 0, london)
}
