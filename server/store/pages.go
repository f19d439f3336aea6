package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/etcdns/etcdns/etcdclient"
)

// A load's pages are read as wire bytes into a buffer that the next page
// reuses, and their keys and values are parsed where they lie. Decoded the
// usual way, every key-value pair of a page became three objects, and the
// page a buffer of its own as large as the page: garbage several times the
// size of the snapshot the load builds, which made the collector run (and
// mark the growing snapshot) several times as often. What a load keeps of
// a key or a value is copied (see view); nothing may hold on to a page's
// bytes, which the next page overwrites.

// rawRange is a Range response kept as its bytes.
type rawRange struct {
	buf   []byte
	kvs   []rawKV // slices of buf
	more  bool
	count int64
}

type rawKV struct {
	key, value []byte
	lease      int64 // the key's etcd lease; 0: none
}

// rangeCodec sends a Range request as any other and reads its response
// into a rawRange. It is used only for the Range calls of a load, so its
// name is the one the server expects of every etcd request.
type rangeCodec struct{}

func (rangeCodec) Name() string { return "proto" }

func (rangeCodec) Marshal(v any) (mem.BufferSlice, error) {
	r, ok := v.(*etcdserverpb.RangeRequest)
	if !ok {
		return nil, fmt.Errorf("range codec: cannot send %T", v)
	}
	return marshal(r)
}

// generated is a message with the encoder gogo generates for etcd's API.
type generated interface{ Marshal() ([]byte, error) }

// marshal encodes m with its generated method, for the codecs here.
func marshal(m generated) (mem.BufferSlice, error) {
	b, err := m.Marshal()
	if err != nil {
		return nil, err
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

func (rangeCodec) Unmarshal(data mem.BufferSlice, v any) error {
	r, ok := v.(*rawRange)
	if !ok {
		return fmt.Errorf("range codec: cannot read into %T", v)
	}
	n := data.Len()
	if cap(r.buf) < n {
		r.buf = make([]byte, n)
	}
	r.buf = r.buf[:n]
	data.CopyTo(r.buf)
	return r.parse()
}

var errRange = errors.New("malformed Range response")

// parse reads buf: RangeResponse{kvs 2, more 3, count 4} and
// KeyValue{key 1, value 5, lease 6}; the other fields (the header,
// revisions) are skipped, as a proto decoder skips fields it does not know.
// A key-value pair of the wrong wire type is an error, not a page short
// of a record.
func (r *rawRange) parse() error {
	r.kvs, r.more, r.count = r.kvs[:0], false, 0
	return fields(r.buf, func(num protowire.Number, typ protowire.Type, b []byte, x uint64) error {
		switch {
		case num == 2 && typ != protowire.BytesType:
			return errRange
		case num == 2:
			var kv rawKV
			err := fields(b, func(num protowire.Number, typ protowire.Type, b []byte, x uint64) error {
				switch {
				case num == 1 && typ == protowire.BytesType:
					kv.key = b
				case num == 5 && typ == protowire.BytesType:
					kv.value = b
				case num == 6 && typ == protowire.VarintType:
					kv.lease = int64(x)
				}
				return nil
			})
			r.kvs = append(r.kvs, kv)
			return err
		case num == 3 && typ == protowire.VarintType:
			r.more = x != 0
		case num == 4 && typ == protowire.VarintType:
			r.count = int64(x)
		}
		return nil
	})
}

// fields calls f with each field of the message in b: its bytes if it is
// length-delimited, its value if it is a varint.
func fields(b []byte, f func(num protowire.Number, typ protowire.Type, b []byte, x uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errRange
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return errRange
		}
		b = b[n:]
		if err := f(num, typ, v, x); err != nil {
			return err
		}
	}
	return nil
}

var rangeCallOpts = append(slices.Clip(etcdclient.CallOptions), grpc.ForceCodecV2(rangeCodec{}))

// rangeInto reads one page into r through the client's connection, so
// that the client's interceptors (its auth token) apply as they do to a
// Get. Errors are etcd's, as clientv3 returns them.
//
// A Get of clientv3 is also retried, within its deadline, when a member
// answers Unavailable (a leader change, a member restarting): its retry
// policy for reads is unexported, so the retries are here, about as far
// apart as clientv3's. Without them each such answer cost a counted page
// retry, a warning, a longer wait and a doubled timeout (fetch).
func (s *Store) rangeInto(ctx context.Context, req *etcdserverpb.RangeRequest, r *rawRange) error {
	for {
		err := s.cli.ActiveConnection().Invoke(ctx, "/etcdserverpb.KV/Range", req, r, rangeCallOpts...)
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case status.Code(err) != codes.Unavailable:
			return rpctypes.Error(err)
		}
		if !sleep(ctx, jitter(unavailableWait)) {
			return ctx.Err()
		}
	}
}

// unavailableWait is clientv3's wait between retries.
const unavailableWait = 25 * time.Millisecond
