package localcluster

import "testing"

func TestLockIPPrefixIsExclusive(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	a, fa, err := lockIPPrefix()
	if err != nil {
		t.Fatal(err)
	}
	b, fb, err := lockIPPrefix()
	if err != nil {
		t.Fatal(err)
	}
	if a == b {
		t.Fatalf("two holders got range %s", a)
	}
	fa.Close()
	c, fc, err := lockIPPrefix()
	if err != nil {
		t.Fatal(err)
	}
	defer fb.Close()
	defer fc.Close()
	if c != a {
		t.Errorf("after releasing %s, got %s; want the released range back", a, c)
	}
}
