package node

import "testing"

func TestExpand(t *testing.T) {
	vars := map[string]string{"POD_NAME": "etcd-0", "POD_IP": "127.77.0.1", "EMPTY": "", "A": "$(B)"}
	tests := []struct {
		in, want string
	}{
		{"", ""},
		{"plain", "plain"},
		{"$(POD_NAME)", "etcd-0"},
		{"--name=$(POD_NAME)", "--name=etcd-0"},
		{"http://$(POD_IP):2380", "http://127.77.0.1:2380"},
		{"$(POD_NAME)$(POD_IP)", "etcd-0127.77.0.1"},
		{"$(EMPTY)x", "x"},
		{"$(UNDEFINED)", "$(UNDEFINED)"},
		{"a $(UNDEFINED) b $(POD_NAME)", "a $(UNDEFINED) b etcd-0"},
		{"$$(POD_NAME)", "$(POD_NAME)"},
		{"$$$(POD_NAME)", "$etcd-0"},
		{"$$$$", "$$"},
		{"$$", "$"},
		{"$", "$"},
		{"x$", "x$"},
		{"$x", "$x"},
		{"$POD_NAME", "$POD_NAME"},
		{"${POD_NAME}", "${POD_NAME}"},
		{"$(", "$("},
		{"$(POD_NAME", "$(POD_NAME"},
		{"$()", "$()"},
		{"$(POD_NAME$(POD_IP))", "$(POD_NAME$(POD_IP))"},
		{"$(A)", "$(B)"}, // values are not expanded again
		{"é$(POD_NAME)é", "éetcd-0é"},
		{"$é", "$é"},
	}
	for _, tt := range tests {
		if got := expand(tt.in, mapLookup(vars)); got != tt.want {
			t.Errorf("expand(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestMapLookupPrefersTheFirstMap(t *testing.T) {
	lookup := mapLookup(map[string]string{"X": "first"}, map[string]string{"X": "second", "Y": "y"})
	if v, _ := lookup("X"); v != "first" {
		t.Errorf("X = %q, want first", v)
	}
	if v, _ := lookup("Y"); v != "y" {
		t.Errorf("Y = %q, want y", v)
	}
	if _, ok := lookup("Z"); ok {
		t.Error("Z found")
	}
}
