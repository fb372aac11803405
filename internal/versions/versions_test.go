package versions

import (
	"strings"
	"testing"
)

func TestStep(t *testing.T) {
	cases := []struct {
		name, target     string
		running          Running
		want, whyContain string
	}{
		{name: "a forming cluster runs the target", target: "3.7.3", want: "3.7.3"},
		{name: "patch upgrade directly", target: "3.6.16", running: Running{ClusterVersion: "3.6.0", Lowest: "3.6.15"}, want: "3.6.16"},
		{name: "patch downgrade directly", target: "3.6.15", running: Running{ClusterVersion: "3.6.0", Lowest: "3.6.16"}, want: "3.6.15"},
		{name: "one minor directly", target: "3.6.16", running: Running{ClusterVersion: "3.5.0", Lowest: "3.5.35"}, want: "3.6.16"},
		{name: "two minors through 3.6", target: "3.7.3", running: Running{ClusterVersion: "3.5.0", Lowest: "3.5.35"}, want: "3.6.16", whyContain: "one minor at a time"},
		{name: "two minors, half of the first step done", target: "3.7.3", running: Running{ClusterVersion: "3.5.0", Lowest: "3.5.35"}, want: "3.6.16", whyContain: "through 3.6.16"},
		{name: "two minors, first step done", target: "3.7.3", running: Running{ClusterVersion: "3.6.0", Lowest: "3.6.16"}, want: "3.7.3"},
		{name: "second step half done", target: "3.7.3", running: Running{ClusterVersion: "3.6.0", Lowest: "3.6.16"}, want: "3.7.3"},
		{name: "done", target: "3.7.3", running: Running{ClusterVersion: "3.7.0", Lowest: "3.7.3"}, want: "3.7.3"},
		{name: "3.5-era log entries hold 3.7 back", target: "3.7.3", running: Running{ClusterVersion: "3.6.0", Lowest: "3.6.16", LegacyLog: true}, want: "3.6.16", whyContain: "cannot replay"},
		{name: "3.5-era log entries hold a direct 3.6 to 3.7 upgrade at the running patch", target: "3.7.3", running: Running{ClusterVersion: "3.6.0", Lowest: "3.6.15", LegacyLog: true}, want: "3.6.15", whyContain: "raft snapshot"},
		{name: "3.5-era log entries do not hold a 3.6 patch upgrade", target: "3.6.16", running: Running{ClusterVersion: "3.6.0", Lowest: "3.6.15", LegacyLog: true}, want: "3.6.16"},
		{name: "old 3.5 moves to a recent 3.5 first", target: "3.6.16", running: Running{ClusterVersion: "3.5.0", Lowest: "3.5.15"}, want: "3.5.35", whyContain: "3.5.20 or later"},
		{name: "old 3.5 patch upgrade is direct", target: "3.5.17", running: Running{ClusterVersion: "3.5.0", Lowest: "3.5.15"}, want: "3.5.17"},
		{name: "cluster version unknown, lowest known", target: "3.7.3", running: Running{ClusterVersion: "", Lowest: "3.5.35"}, want: "3.6.16", whyContain: "one minor at a time"},
		{name: "rollback within the cluster version", target: "3.5.35", running: Running{ClusterVersion: "3.5.0", Lowest: "3.5.35"}, want: "3.5.35"},
		{name: "unparsable target passes through", target: "x", running: Running{ClusterVersion: "3.5.0", Lowest: "3.5.35"}, want: "x"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, why := Step(tc.target, tc.running)
			if got != tc.want {
				t.Fatalf("Step(%s, %+v) = %s, want %s", tc.target, tc.running, got, tc.want)
			}
			if (tc.whyContain == "") != (why == "") || !strings.Contains(why, tc.whyContain) {
				t.Fatalf("why = %q, want it to hold %q", why, tc.whyContain)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	cases := []struct {
		target  string
		running Running
		wantErr string
	}{
		{target: "3.6.16", running: Running{}},
		{target: "3.5.35", running: Running{ClusterVersion: "3.5.0", Lowest: "3.6.16"}},
		{target: "3.6.15", running: Running{ClusterVersion: "3.6.0", Lowest: "3.6.16"}},
		{target: "3.5.35", running: Running{ClusterVersion: "3.6.0", Lowest: "3.6.16"}, wantErr: "older than the cluster version 3.6"},
		{target: "3.6.16", running: Running{ClusterVersion: "3.7.0", Lowest: "3.7.3"}, wantErr: "set spec.version to a 3.7 release"},
	}
	for _, tc := range cases {
		err := Check(tc.target, tc.running)
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("Check(%s, %+v) = %v, want error holding %q", tc.target, tc.running, err, tc.wantErr)
		}
	}
}

func TestLess(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"3.5.35", "3.6.0", true}, {"3.6.9", "3.6.16", true}, {"3.6.16", "3.6.16", false}, {"3.7.0", "3.6.99", false},
		{"v3.5.1", "3.5.2", true}, {"bad", "3.5.0", true}, {"3.5.0", "bad", false},
	} {
		if got := Less(tc.a, tc.b); got != tc.want {
			t.Errorf("Less(%s, %s) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}
