package node

import (
	"reflect"
	"strings"
	"testing"
)

func TestImageBinds(t *testing.T) {
	const img = "/images/x"
	at := func(target string) bindMount { return bindMount{Source: img, Target: target, ReadOnly: true} }
	vol := func(target string) bindMount { return bindMount{Source: "/vol", Target: target} }
	for _, tc := range []struct {
		name    string
		command string
		mounts  []bindMount
		want    []bindMount
		wantErr string
	}{
		{name: "in /usr/local/bin", command: "/usr/local/bin/etcd", want: []bindMount{at("/usr/local/bin")}},
		{name: "looked up in PATH", command: "sh", want: []bindMount{at("/usr/local/bin")}},
		{name: "relative", command: "./run", want: []bindMount{at("/usr/local/bin")}},
		{name: "elsewhere", command: "/opt/tool/run", want: []bindMount{at("/usr/local/bin"), at("/opt/tool")}},
		{name: "in a volume", command: "/guard/etcd-pilot", mounts: []bindMount{vol("/guard")}, want: []bindMount{at("/usr/local/bin")}},
		{name: "under a volume", command: "/guard/bin/etcd-pilot", mounts: []bindMount{vol("/data"), vol("/guard")}, want: []bindMount{at("/usr/local/bin")}},
		{name: "beside a volume", command: "/guarded/run", mounts: []bindMount{vol("/guard")}, want: []bindMount{at("/usr/local/bin"), at("/guarded")}},
		{name: "above a volume", command: "/srv/run", mounts: []bindMount{vol("/srv/data")}, want: []bindMount{at("/usr/local/bin"), at("/srv")}},
		{name: "in /", command: "/run", wantErr: "lies in /"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := imageBinds(img, tc.command, tc.mounts)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, %v; want an error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}
