package plan

import (
	"encoding/json"
	"testing"
)

// FuzzIntentJSON reads intent annotations of any content. Reading never panics, and what was
// read writes back to the same intent: the controller rewrites the annotation it read, and a
// change there would change the member the next step acts on.
func FuzzIntentJSON(f *testing.F) {
	for _, s := range []string{
		`{"op":"add","member":"etcd-3","peerURL":"http://etcd-3.etcd.ns.svc:2380","reason":"ScaleOut","startedAt":"2025-01-01T12:00:00Z"}`,
		`{"op":"replace","member":"etcd-1","id":"8e9e05c52164694d","peerURL":"https://etcd-1.etcd.ns.svc:2380","claimUID":"u","reason":"ReplaceMember","startedAt":"2025-01-01T12:00:00+02:00"}`,
		`{"op":"remove","member":"etcd-2","id":"0"}`,
		`{"op":"replace","member":"etcd-1","reason":"ReplaceMember","runBeforeAdd":{"podUID":"p","startedAt":"2025-01-01T12:00:03Z"}}`,
		`{"op":"replace","member":"etcd-1","addingAt":"2025-01-01T12:00:03Z"}`,
		`{"runBeforeAdd":{}}`,
		`{"runBeforeAdd":null}`,
		`{"id":"ffffffffffffffff"}`,
		`{"id":"10000000000000000"}`,
		`{"id":"-1"}`,
		`{"id":"0x10"}`,
		`{"startedAt":"0001-01-01T00:00:00Z"}`,
		`null`,
		`[]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var in Intent
		if err := json.Unmarshal(data, &in); err != nil {
			return
		}
		b, err := json.Marshal(in)
		if err != nil {
			// A time outside what JSON can hold (year above 9999) reads but does not write.
			return
		}
		var back Intent
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("intent %s written as %s does not read back: %v", data, b, err)
		}
		if back.Op != in.Op || back.Member != in.Member || back.ID != in.ID || back.PeerURL != in.PeerURL ||
			back.ClaimUID != in.ClaimUID || back.Reason != in.Reason || !back.StartedAt.Equal(in.StartedAt) ||
			(back.RunBeforeAdd == nil) != (in.RunBeforeAdd == nil) ||
			(in.RunBeforeAdd != nil && (back.RunBeforeAdd.PodUID != in.RunBeforeAdd.PodUID || !back.RunBeforeAdd.StartedAt.Equal(in.RunBeforeAdd.StartedAt))) {
			t.Fatalf("intent %s read as %+v, written as %s, read back as %+v", data, in, b, back)
		}
	})
}
