package objstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// harness is one Store under test and a look behind it.
type harness struct {
	store Store
	// leftovers lists what a failed Put of key may have left behind outside the Store's view
	// (temporary files, incomplete multipart uploads); a correct Put leaves none.
	leftovers func(t *testing.T, key string) []string
}

// testStore runs the behaviour every Store promises. newHarness returns a fresh, empty store
// each time it is called.
func testStore(t *testing.T, newHarness func(t *testing.T) harness) {
	t.Run("RoundTrip", func(t *testing.T) {
		h := newHarness(t)
		ctx := t.Context()
		want := randomBytes(12<<20 + 123) // three 5 MiB parts when the part size is the minimum
		before := time.Now().Add(-time.Minute)
		n, err := h.store.Put(ctx, "cluster/a/snap.db", bytes.NewReader(want))
		if err != nil {
			t.Fatal(err)
		}
		if n != int64(len(want)) {
			t.Errorf("Put returned size %d, want %d", n, len(want))
		}
		if got := read(t, h.store, "cluster/a/snap.db"); !bytes.Equal(got, want) {
			t.Errorf("Open returned %d bytes that differ from the %d put", len(got), len(want))
		}
		objs, err := h.store.List(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		if len(objs) != 1 || objs[0].Key != "cluster/a/snap.db" || objs[0].Size != int64(len(want)) || objs[0].LastModified.Before(before) {
			t.Errorf("List = %+v, want one object cluster/a/snap.db of %d bytes modified after %s", objs, len(want), before)
		}

		// Put replaces.
		if _, err := h.store.Put(ctx, "cluster/a/snap.db", strings.NewReader("second")); err != nil {
			t.Fatal(err)
		}
		if got := read(t, h.store, "cluster/a/snap.db"); string(got) != "second" {
			t.Errorf("after a second Put, Open returned %q, want %q", got, "second")
		}

		if err := h.store.Delete(ctx, "cluster/a/snap.db"); err != nil {
			t.Fatal(err)
		}
		if _, err := h.store.Open(ctx, "cluster/a/snap.db"); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Open after Delete: %v, want an error matching fs.ErrNotExist", err)
		}
		if objs := list(t, h.store, ""); len(objs) != 0 {
			t.Errorf("List after Delete = %v, want nothing", objs)
		}
	})

	t.Run("EmptyObject", func(t *testing.T) {
		h := newHarness(t)
		n, err := h.store.Put(t.Context(), "empty", strings.NewReader(""))
		if err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("Put of nothing returned size %d", n)
		}
		if got := read(t, h.store, "empty"); len(got) != 0 {
			t.Errorf("Open returned %d bytes, want 0", len(got))
		}
		if objs := list(t, h.store, ""); len(objs) != 1 || objs[0].Key != "empty" || objs[0].Size != 0 {
			t.Errorf("List = %+v, want one empty object", objs)
		}
	})

	t.Run("ListIsSortedAndPrefixIsAStringPrefix", func(t *testing.T) {
		h := newHarness(t)
		// Put out of order, with keys whose file-system order differs from their key order
		// ("a-b" sorts before "a/b" as a string, after the folder "a" in a directory walk).
		for _, k := range []string{"b", "a/c/d", "a/b", "a-b", "ab"} {
			if _, err := h.store.Put(t.Context(), k, strings.NewReader(k)); err != nil {
				t.Fatal(err)
			}
		}
		for _, tc := range []struct {
			prefix string
			want   []string
		}{
			{"", []string{"a-b", "a/b", "a/c/d", "ab", "b"}},
			{"a", []string{"a-b", "a/b", "a/c/d", "ab"}},
			{"a/", []string{"a/b", "a/c/d"}},
			{"a/c", []string{"a/c/d"}},
			{"a/c/d", []string{"a/c/d"}},
			{"c", nil},
			{"missing/folder/", nil},
		} {
			var got []string
			for _, o := range list(t, h.store, tc.prefix) {
				got = append(got, o.Key)
				if o.Size != int64(len(o.Key)) {
					t.Errorf("List(%q): %s has size %d, want %d", tc.prefix, o.Key, o.Size, len(o.Key))
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("List(%q) = %q, want %q", tc.prefix, got, tc.want)
			}
		}
	})

	t.Run("DeleteMissingIsSuccess", func(t *testing.T) {
		h := newHarness(t)
		if err := h.store.Delete(t.Context(), "never/there"); err != nil {
			t.Errorf("Delete of a missing key: %v", err)
		}
	})

	t.Run("OpenMissing", func(t *testing.T) {
		h := newHarness(t)
		_, err := h.store.Open(t.Context(), "never/there")
		if !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("Open of a missing key: %v, want an error matching fs.ErrNotExist", err)
		}
		if !strings.HasPrefix(err.Error(), "failed to open "+h.store.Location("never/there")) {
			t.Errorf("Open's error %q does not start with failed to open <location>", err)
		}
	})

	t.Run("ReaderFailsHalfWay", func(t *testing.T) {
		h := newHarness(t)
		ctx := t.Context()
		if _, err := h.store.Put(ctx, "kept", strings.NewReader("old")); err != nil {
			t.Fatal(err)
		}
		boom := errors.New("snapshot stream broke")
		for _, key := range []string{"new", "kept"} {
			// 12 MiB then an error: with the minimum part size, two parts are already uploaded.
			r := io.MultiReader(&pattern{left: 12 << 20}, errReader{boom})
			if _, err := h.store.Put(ctx, key, r); !errors.Is(err, boom) {
				t.Errorf("Put(%s) from a failing reader: %v, want the reader's error", key, err)
			}
			if l := h.leftovers(t, key); len(l) != 0 {
				t.Errorf("a failed Put(%s) left %q behind", key, l)
			}
		}
		if _, err := h.store.Open(ctx, "new"); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("a failed Put left an object: Open: %v", err)
		}
		if got := read(t, h.store, "kept"); string(got) != "old" {
			t.Errorf("a failed Put over an object changed it to %d bytes", len(got))
		}
		if objs := list(t, h.store, ""); len(objs) != 1 || objs[0].Key != "kept" {
			t.Errorf("List after failed Puts = %+v, want only kept", objs)
		}
	})

	t.Run("ContextEndsMidUpload", func(t *testing.T) {
		h := newHarness(t)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		// The reader cancels the context once 12 MiB are read and then keeps yielding data.
		r := &pattern{left: 64 << 20, at: 12 << 20, hook: cancel}
		if _, err := h.store.Put(ctx, "cancelled", r); !errors.Is(err, context.Canceled) {
			t.Errorf("Put with a context cancelled mid-upload: %v, want context.Canceled", err)
		}
		if r.read >= 64<<20 {
			t.Errorf("Put read the whole reader (%d bytes) after its context ended", r.read)
		}
		if l := h.leftovers(t, "cancelled"); len(l) != 0 {
			t.Errorf("a cancelled Put left %q behind", l)
		}
		if objs := list(t, h.store, ""); len(objs) != 0 {
			t.Errorf("a cancelled Put left %+v", objs)
		}
	})

	t.Run("InvalidKeys", func(t *testing.T) {
		h := newHarness(t)
		ctx := t.Context()
		for _, k := range []string{"", "/a", "a/", "a//b", "../a", "a/../b", "./a", tmpPrefix + "x", "a/" + tmpPrefix + "y"} {
			if _, err := h.store.Put(ctx, k, strings.NewReader("x")); err == nil {
				t.Errorf("Put(%q) succeeded, want an invalid key error", k)
			}
			if _, err := h.store.Open(ctx, k); err == nil || errors.Is(err, fs.ErrNotExist) {
				t.Errorf("Open(%q): %v, want an invalid key error", k, err)
			}
			if err := h.store.Delete(ctx, k); err == nil {
				t.Errorf("Delete(%q) succeeded, want an invalid key error", k)
			}
		}
		for _, p := range []string{"../", "/a", "a//b", "../../etc/x"} {
			if _, err := h.store.List(ctx, p); err == nil {
				t.Errorf("List(%q) succeeded, want an invalid prefix error", p)
			}
		}
		if objs := list(t, h.store, ""); len(objs) != 0 {
			t.Errorf("invalid keys stored %+v", objs)
		}
	})
}

func read(t *testing.T, s Store, key string) []byte {
	t.Helper()
	rc, err := s.Open(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("failed to read %s: %v", s.Location(key), err)
	}
	return data
}

func list(t *testing.T, s Store, prefix string) []Object {
	t.Helper()
	objs, err := s.List(t.Context(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// pattern yields left bytes of a fixed pattern without holding them, and calls hook once when
// at bytes have been read (if hook is set).
type pattern struct {
	left, read, at int64
	hook           func()
}

var block = randomBytes(64 << 10)

func (p *pattern) Read(b []byte) (int, error) {
	if p.left == 0 {
		return 0, io.EOF
	}
	limit := len(b)
	if int64(limit) > p.left {
		limit = int(p.left)
	}
	n := 0
	for n < limit {
		n += copy(b[n:limit], block[(p.read+int64(n))%int64(len(block)):])
	}
	p.left -= int64(n)
	p.read += int64(n)
	if p.hook != nil && p.read >= p.at {
		p.hook()
		p.hook = nil
	}
	return n, nil
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }
