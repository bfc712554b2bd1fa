package tmpfile

import (
	"os"
	"testing"
)

func TestBudget(t *testing.T) {
	b := NewBudget(10)
	if !b.Take(6) || b.Take(5) || b.Left() != 4 || b.Max() != 10 {
		t.Fatalf("take 6 then 5 of 10: left %d", b.Left())
	}
	b.Give(6)
	if b.Left() != 10 {
		t.Fatalf("given back: left %d", b.Left())
	}
}

func TestUnlinked(t *testing.T) {
	dir := t.TempDir()
	f, err := Unlinked(dir, "x-*")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("kept while open"); err != nil {
		t.Fatal(err)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("files left in the directory: %v", left)
	}
	if _, err := Unlinked("/nonexistent/tmpfile", "x-*"); err == nil {
		t.Fatal("no error without a directory")
	}
}
