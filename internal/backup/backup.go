// Package backup checks etcd snapshot streams on their way to storage. etcd streams a member's
// database (a bbolt file) followed by the 32-byte SHA-256 of every byte before it; etcdutl
// snapshot restore checks that trailer. A Verifier passes the stream through unchanged,
// trailer included, so what is stored stays restorable, and fails the read at the end of the
// stream when the trailer does not match: an uploader that aborts on a read error then never
// stores a corrupt or truncated snapshot. It knows nothing of etcd's client or of storage.
package backup

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
)

// ErrIntegrity is matched (errors.Is) by the error a Verifier returns at the end of a stream
// that is not an intact etcd snapshot.
var ErrIntegrity = errors.New("etcd snapshot failed its integrity check")

const (
	// trailerSize is the SHA-256 etcd appends to the database.
	trailerSize = sha256.Size
	// restoreAlign is what etcdutl expects the database's size to be a multiple of: it only
	// looks for the trailer when size%512 == 32, and refuses a snapshot without one.
	restoreAlign = 512
	// bbolt's first page is a meta page: a 16-byte page header, then the magic, the format
	// version and the page size, each a native-endian uint32.
	boltMetaOffset = 16
	boltMagic      = 0xED0CDAED
	boltVersion    = 2
	boltHeadSize   = boltMetaOffset + 12
)

// Verifier is an io.Reader over an etcd snapshot stream; see NewVerifier. It is not safe for
// concurrent use.
type Verifier struct {
	r io.Reader

	// h hashes every byte but the last trailerSize seen so far, which wait in tail: at the
	// end of the stream h holds the database and tail the trailer. Appending tail to h then
	// gives the whole object's hash, so each byte is hashed once.
	h    hash.Hash
	tail [trailerSize]byte
	nt   int
	head [boltHeadSize]byte
	nh   int
	size int64

	err error  // sticky: io.EOF, ErrIntegrity or the source's error
	sum string // hex SHA-256 of the whole stream, set at its end
}

// NewVerifier returns a reader that yields r's bytes unchanged and, at the end of r, returns
// io.EOF when they are an intact etcd snapshot and an error matching ErrIntegrity otherwise:
// the trailing SHA-256 differs from that of the bytes before it, the stream is shorter than
// the trailer, or what precedes the trailer is not a whole bbolt database (its first page
// missing or unreadable, or a size etcdutl would not restore). A read that delivers bytes
// never carries the verdict; it comes with the next read, with no bytes. An error from r is
// returned as it is. The Verifier keeps a few dozen bytes of its own, whatever the stream's
// size.
func NewVerifier(r io.Reader) *Verifier {
	return &Verifier{r: r, h: sha256.New()}
}

// Read implements io.Reader.
func (v *Verifier) Read(p []byte) (int, error) {
	if v.err != nil {
		return 0, v.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	n, err := v.r.Read(p)
	if n > 0 {
		v.consume(p[:n])
	}
	if err == nil {
		return n, nil
	}
	if err == io.EOF {
		err = v.finish()
	}
	v.err = err
	if n > 0 {
		return n, nil
	}
	return 0, err
}

func (v *Verifier) consume(c []byte) {
	v.size += int64(len(c))
	if v.nh < len(v.head) {
		v.nh += copy(v.head[v.nh:], c)
	}
	if len(c) >= trailerSize {
		v.h.Write(v.tail[:v.nt])
		v.h.Write(c[:len(c)-trailerSize])
		v.nt = copy(v.tail[:], c[len(c)-trailerSize:])
		return
	}
	// Keep the last trailerSize bytes of tail+c, hashing what falls out.
	if over := v.nt + len(c) - trailerSize; over > 0 {
		v.h.Write(v.tail[:over])
		v.nt = copy(v.tail[:], v.tail[over:v.nt])
	}
	v.nt += copy(v.tail[v.nt:], c)
}

// finish runs at the end of the stream: it records the whole object's hash and returns io.EOF
// or the reason the stream is not an intact snapshot.
func (v *Verifier) finish() error {
	body := v.h.Sum(nil)
	v.h.Write(v.tail[:v.nt])
	v.sum = hex.EncodeToString(v.h.Sum(nil))
	if v.size < trailerSize {
		return fmt.Errorf("%w: the stream has %d bytes, fewer than its %d-byte SHA-256 trailer", ErrIntegrity, v.size, trailerSize)
	}
	dbSize := v.size - trailerSize
	if string(body) != string(v.tail[:]) {
		return fmt.Errorf("%w: the trailer says SHA-256 %x, but the %d bytes before it hash to %x", ErrIntegrity, v.tail[:], dbSize, body)
	}
	if dbSize%restoreAlign != 0 {
		return fmt.Errorf("%w: a database of %d bytes is not a multiple of %d bytes (etcdutl would not find the trailer)", ErrIntegrity, dbSize, restoreAlign)
	}
	if dbSize < boltHeadSize {
		return fmt.Errorf("%w: a database of %d bytes is shorter than a bbolt page", ErrIntegrity, dbSize)
	}
	// bbolt writes its meta page in the machine's byte order; accept either.
	meta := v.head[boltMetaOffset:]
	var order binary.ByteOrder = binary.LittleEndian
	if order.Uint32(meta) != boltMagic {
		order = binary.BigEndian
	}
	if order.Uint32(meta) != boltMagic || order.Uint32(meta[4:]) != boltVersion {
		return fmt.Errorf("%w: the database does not start with a bbolt meta page (magic %x)", ErrIntegrity, meta[:4])
	}
	if page := int64(order.Uint32(meta[8:])); page == 0 || dbSize < page || dbSize%page != 0 {
		return fmt.Errorf("%w: a database of %d bytes is not a whole number of its %d-byte bbolt pages", ErrIntegrity, dbSize, page)
	}
	return io.EOF
}

// Sum is the hex SHA-256 of every byte read, trailer included: the hash of what is stored.
// It is empty until Read has returned io.EOF or an ErrIntegrity error.
func (v *Verifier) Sum() string { return v.sum }

// Size is how many bytes have been read, trailer included; the object's size once Read has
// returned io.EOF.
func (v *Verifier) Size() int64 { return v.size }

// Result describes a snapshot copied whole and verified.
type Result struct {
	// Size is the number of bytes copied, trailer included.
	Size int64
	// SHA256 is the hex SHA-256 of those bytes.
	SHA256 string
}

// Copy copies the snapshot stream snap to dst through a Verifier, and stops at the first read
// after ctx ends. It returns an error matching ErrIntegrity when the stream is not an intact
// snapshot; dst has then received every byte, so the caller must discard what it wrote.
func Copy(ctx context.Context, dst io.Writer, snap io.Reader) (Result, error) {
	v := NewVerifier(ctxReader{ctx: ctx, r: snap})
	if _, err := io.Copy(dst, v); err != nil {
		return Result{}, fmt.Errorf("failed to copy etcd snapshot: %w", err)
	}
	return Result{Size: v.Size(), SHA256: v.Sum()}, nil
}

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
