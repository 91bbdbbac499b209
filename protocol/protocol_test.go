package protocol_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/leased/leased/protocol"
	"github.com/vmihailenco/msgpack/v5"
)

// sample is one message for the round-trip tests. want is what decoding the
// encoded msg must give; nil means msg itself.
//
// A note on nil and empty: msgpack writes a nil slice or map as nil and an
// empty one as a zero-length array, bin or map, and decodes each back as it
// was, so fields without omitempty keep the difference. A field tagged
// omitempty is left out of the encoding when it is empty, and so decodes as
// nil: an empty non-nil GetReply.Value, Write.Value or AcquireReply.Value comes
// back nil. Those samples spell out their want.
type sample struct {
	name string
	msg  protocol.Message
	want protocol.Message
}

func (s sample) expected() protocol.Message {
	if s.want != nil {
		return s.want
	}
	return s.msg
}

const maxDuration = time.Duration(math.MaxInt64)
const minDuration = time.Duration(math.MinInt64)

// samples returns fresh messages of every type, each with non-zero fields,
// and variants with nil, empty and extreme values.
func samples() []sample {
	bigKey := bytes.Repeat([]byte{'k'}, protocol.MaxKeySize)
	bigValue := make([]byte, 1<<20)
	for i := range bigValue {
		bigValue[i] = byte(i * 7)
	}
	binKey := []byte{0x00, 0xff, 0xc1, 0x80, 0x90, 0xa0}
	return []sample{
		{name: "hello", msg: &protocol.Hello{Version: protocol.Version, Client: "leased-cli/1.2 ✓"}},
		{name: "hello/no client", msg: &protocol.Hello{Version: math.MaxUint16}},
		{name: "hello/invalid utf8 client", msg: &protocol.Hello{Version: 7, Client: "\xff\xfe\x00"}},
		{name: "hello_reply", msg: &protocol.HelloReply{
			Version: protocol.Version, SessionID: math.MaxUint64,
			Epsilon: 250 * time.Millisecond, DefaultTerm: 10 * time.Second,
			MaxKeySize: protocol.MaxKeySize, MaxValueSize: 1 << 20, MaxFrameSize: protocol.DefaultMaxFrameSize, MaxInflight: 1000,
			RetryWindow: time.Minute, ServerVersion: "v1.2.0",
		}},
		{name: "hello_reply/devel version", msg: &protocol.HelloReply{
			Version: protocol.Version, SessionID: 2,
			ServerVersion: "devel-20261125030739-3ba5826a1b2c+dirty ✓\xff",
		}},
		{name: "hello_reply/extremes", msg: &protocol.HelloReply{
			Version: 1, SessionID: 1,
			Epsilon: minDuration, DefaultTerm: maxDuration,
			MaxKeySize: math.MaxInt, MaxValueSize: math.MinInt, MaxFrameSize: -1, MaxInflight: math.MaxInt32 + 1,
		}},
		{name: "get", msg: &protocol.Get{ID: 1, Key: []byte("user:1"), Revalidate: true, Known: 42}},
		{name: "get/binary key big ids", msg: &protocol.Get{ID: math.MaxUint64, Key: binKey, Known: math.MaxUint64}},
		{name: "get/empty key", msg: &protocol.Get{ID: 2, Key: []byte{}}},
		{name: "get/nil key", msg: &protocol.Get{ID: 3}},
		{name: "get/max key", msg: &protocol.Get{ID: 4, Key: bigKey}},
		{name: "get_reply", msg: &protocol.GetReply{ID: 5, Found: true, Value: []byte("v"), Version: 99, Term: 3 * time.Second}},
		{name: "get_reply/unchanged", msg: &protocol.GetReply{ID: 6, Found: true, Unchanged: true, Version: math.MaxUint64, Term: maxDuration}},
		{name: "get_reply/not found", msg: &protocol.GetReply{ID: 7, Version: 1, Term: -time.Nanosecond}},
		{
			name: "get_reply/empty value is omitted",
			msg:  &protocol.GetReply{ID: 8, Found: true, Value: []byte{}, Version: 2, Term: time.Second},
			want: &protocol.GetReply{ID: 8, Found: true, Value: nil, Version: 2, Term: time.Second},
		},
		{name: "get_reply/max value", msg: &protocol.GetReply{ID: 9, Found: true, Value: bigValue, Version: 3, Term: time.Minute}},
		{name: "write/put", msg: &protocol.Write{ID: 10, Op: protocol.OpPut, Key: []byte("k"), Value: []byte("v"), Token: 77, Timeout: 5 * time.Second}},
		{name: "write/delete", msg: &protocol.Write{ID: 11, Op: protocol.OpDelete, Key: []byte("k")}},
		{name: "write/guarded", msg: &protocol.Write{ID: 15, Op: protocol.OpPut, Key: []byte("k"), Value: []byte("v"), Guard: &protocol.Guard{Key: []byte("lock"), Token: math.MaxUint64}}},
		{name: "write/under", msg: &protocol.Write{ID: 16, Op: protocol.OpDelete, Key: []byte("k"), Token: 9, Under: math.MaxUint64}},
		{name: "write/cas", msg: &protocol.Write{ID: 12, Op: protocol.OpCAS, Key: binKey, Value: binKey, Expect: math.MaxUint64, Token: math.MaxUint64, Timeout: maxDuration}},
		{name: "write/max key and value", msg: &protocol.Write{ID: math.MaxUint64, Op: protocol.OpCAS, Key: bigKey, Value: bigValue, Expect: math.MaxUint64, Token: math.MaxUint64, Timeout: maxDuration}},
		{
			name: "write/empty value is omitted",
			msg:  &protocol.Write{ID: 13, Op: protocol.OpPut, Key: []byte("k"), Value: []byte{}},
			want: &protocol.Write{ID: 13, Op: protocol.OpPut, Key: []byte("k")},
		},
		{name: "write/unknown op", msg: &protocol.Write{ID: 14, Op: 255, Key: []byte{}, Timeout: minDuration}},
		{name: "write_reply", msg: &protocol.WriteReply{ID: 15, Version: 16, Waited: 1500 * time.Millisecond, Holders: 3, Term: time.Second}},
		{name: "write_reply/extremes", msg: &protocol.WriteReply{ID: math.MaxUint64, Version: math.MaxUint64, Waited: maxDuration, Holders: math.MaxInt, Term: minDuration}},
		{name: "renew", msg: &protocol.Renew{ID: 17, Keys: [][]byte{[]byte("a"), {}, nil, bigKey, binKey}}},
		{name: "renew/nil keys", msg: &protocol.Renew{ID: 18}},
		{name: "renew/empty keys", msg: &protocol.Renew{ID: 19, Keys: [][]byte{}}},
		{name: "renew_reply", msg: &protocol.RenewReply{ID: 20, Terms: []time.Duration{0, time.Nanosecond, -1, maxDuration, minDuration, 10 * time.Second}}},
		{name: "renew_reply/nil terms", msg: &protocol.RenewReply{ID: 21}},
		{name: "renew_reply/empty terms", msg: &protocol.RenewReply{ID: 22, Terms: []time.Duration{}}},
		{name: "release", msg: &protocol.Release{ID: 23, Keys: [][]byte{[]byte("x"), []byte("y")}}},
		{name: "release/empty keys", msg: &protocol.Release{ID: 24, Keys: [][]byte{}}},
		{name: "acquire", msg: &protocol.Acquire{ID: 25, Key: []byte("lock"), Timeout: 30 * time.Second}},
		{name: "acquire/no timeout", msg: &protocol.Acquire{ID: 26, Key: bigKey}},
		{name: "acquire/lock", msg: &protocol.Acquire{ID: 27, Key: []byte("lock"), Mode: protocol.AcquireWait, Lease: math.MaxUint64, LockDelay: protocol.MaxLockDelay}},
		{name: "acquire/try", msg: &protocol.Acquire{ID: 28, Key: []byte("lock"), Mode: protocol.AcquireTry}},
		{name: "acquire_reply", msg: &protocol.AcquireReply{ID: 27, Token: math.MaxUint64, Term: 10 * time.Second, Found: true, Value: []byte("committed"), Version: 28}},
		{name: "acquire_reply/not found", msg: &protocol.AcquireReply{ID: 29, Token: 1, Term: time.Second}},
		{name: "acquire_reply/max value", msg: &protocol.AcquireReply{ID: 30, Token: 2, Term: time.Second, Found: true, Value: bigValue, Version: math.MaxUint64}},
		{
			name: "acquire_reply/empty value is omitted",
			msg:  &protocol.AcquireReply{ID: 31, Token: 3, Found: true, Value: []byte{}},
			want: &protocol.AcquireReply{ID: 31, Token: 3, Found: true},
		},
		{name: "release_write", msg: &protocol.ReleaseWrite{ID: 32, Key: []byte("lock"), Token: math.MaxUint64}},
		{name: "release_write/under", msg: &protocol.ReleaseWrite{ID: 33, Key: []byte("lock"), Token: 1, Under: 7}},
		{name: "cancel", msg: &protocol.Cancel{ID: math.MaxUint64}},
		{name: "ack", msg: &protocol.Ack{Keys: [][]byte{[]byte("a"), bigKey, {}, nil}}},
		{name: "ack/nil keys", msg: &protocol.Ack{}},
		{name: "ack/empty keys", msg: &protocol.Ack{Keys: [][]byte{}}},
		{name: "ack/prefixes", msg: &protocol.Ack{Keys: [][]byte{[]byte("d/a")}, Prefixes: [][]byte{[]byte("d/"), {}}}},
		{name: "stats", msg: &protocol.Stats{ID: 33}},
		{name: "stats_reply", msg: &protocol.StatsReply{
			ID: 34, Revision: math.MaxUint64, Sessions: 5, Leases: 6, WriteLeases: 7, WritesWaiting: 8,
			InvalidationsSent: 9, InvalidationsAcked: 10, InvalidationsExpired: 11, InvalidationsCancelled: 14, Recalls: 12, LeasesRenewed: 13,
			MessagesIn:  map[string]uint64{"get": 100, "write": math.MaxUint64, "": 0},
			MessagesOut: map[string]uint64{"get_reply": 100},
			Uptime:      72 * time.Hour, DefaultTerm: 10 * time.Second, Epsilon: 250 * time.Millisecond, WritesAllowedIn: -time.Second,
		}},
		{name: "stats_reply/nil maps", msg: &protocol.StatsReply{ID: 35, Sessions: -1, Uptime: maxDuration}},
		{name: "stats_reply/empty maps", msg: &protocol.StatsReply{ID: 36, MessagesIn: map[string]uint64{}, MessagesOut: map[string]uint64{}}},
		{name: "goodbye", msg: &protocol.Goodbye{ID: 37}},
		{name: "ok", msg: &protocol.OK{ID: math.MaxUint64}},
		{name: "error", msg: &protocol.Error{ID: 38, Code: protocol.CodeVersionMismatch, Message: "version 3, expected 4 ✗"}},
		{name: "error/session", msg: &protocol.Error{Code: protocol.CodeProtocol, Message: strings.Repeat("m", 70000)}},
		{name: "error/unknown code", msg: &protocol.Error{ID: 39, Code: math.MaxUint16}},
		{name: "invalidate", msg: &protocol.Invalidate{Keys: [][]byte{[]byte("a"), []byte("b"), binKey}}},
		{name: "invalidate/empty keys", msg: &protocol.Invalidate{Keys: [][]byte{}}},
		{name: "invalidate/prefixes", msg: &protocol.Invalidate{Prefixes: [][]byte{[]byte("d/"), []byte("d/e/")}}},
		{name: "recall", msg: &protocol.Recall{Key: []byte("lock"), Token: math.MaxUint64}},
		{name: "recall/nil key", msg: &protocol.Recall{Token: 1}},
		{name: "hello/admin", msg: &protocol.Hello{Version: protocol.Version, Client: "leasectl", Admin: true}},
		{name: "member_list", msg: &protocol.MemberList{ID: 40}},
		{name: "member_list_reply", msg: &protocol.MemberListReply{ID: 41, Members: []protocol.Member{
			{Name: "n1", PeerAddr: "10.0.0.1:7410", Voter: true, Leads: true}, {Name: "n2 ✓", PeerAddr: "[::1]:7411"}, {}}}},
		{name: "member_list_reply/nil members", msg: &protocol.MemberListReply{ID: math.MaxUint64}},
		{name: "member_add", msg: &protocol.MemberAdd{ID: 42, Name: "n4", PeerAddr: "10.0.0.4:7410"}},
		{name: "member_remove", msg: &protocol.MemberRemove{ID: 43, Name: "n2"}},
		{name: "member_transfer", msg: &protocol.MemberTransfer{ID: 44, To: "n3"}},
		{name: "member_transfer/any", msg: &protocol.MemberTransfer{ID: 45}},
		{name: "endpoint_status", msg: &protocol.EndpointStatus{ID: 46}},
		{name: "endpoint_status_reply", msg: &protocol.EndpointStatusReply{ID: 47, Name: "n1", ClientAddr: "10.0.0.1:7400",
			PeerAddr: "10.0.0.1:7410", Role: protocol.RoleLeader, RaftTerm: math.MaxUint64, CommitIndex: 9, AppliedIndex: 8,
			Leader: "n1", LeaderAddr: "10.0.0.1:7400", WritesHeldFor: maxDuration, Version: "v1.2.3 go1.26.8", Policy: "0123456789ab"}},
		{name: "endpoint_status_reply/follower", msg: &protocol.EndpointStatusReply{ID: 48, Role: protocol.RoleFollower, WritesHeldFor: minDuration}},
		{name: "snapshot_save", msg: &protocol.SnapshotSave{ID: 49}},
		{name: "snapshot_save_reply", msg: &protocol.SnapshotSaveReply{ID: 50, AppliedIndex: math.MaxUint64, Revision: 7, Fence: 2, Keys: 5,
			Deleted: 1, WriteLeases: 1, Bytes: math.MaxInt64, Digest: strings.Repeat("ab", 32)}},
		{name: "write/put with lease", msg: &protocol.Write{ID: 51, Op: protocol.OpPut, Key: []byte("svc/a"), Value: []byte("10.0.0.1"), Lease: 0x694d71ddacfda227, Acked: 50}},
		{name: "lease_grant", msg: &protocol.LeaseGrant{ID: 52, TTL: 60 * time.Second, Acked: 51}},
		{name: "lease_grant/extremes", msg: &protocol.LeaseGrant{ID: math.MaxUint64, TTL: minDuration, Acked: math.MaxUint64}},
		{name: "lease_grant_reply", msg: &protocol.LeaseGrantReply{ID: 53, Lease: 0x694d71ddacfda227, TTL: 60 * time.Second}},
		{name: "lease_grant_reply/duplicate", msg: &protocol.LeaseGrantReply{ID: 54, Lease: math.MaxUint64, TTL: maxDuration, Duplicate: true}},
		{name: "lease_revoke", msg: &protocol.LeaseRevoke{ID: 55, Lease: 0xab, Timeout: 5 * time.Second}},
		{name: "lease_revoke/no timeout", msg: &protocol.LeaseRevoke{ID: 56, Lease: math.MaxUint64}},
		{name: "lease_revoke_reply", msg: &protocol.LeaseRevokeReply{ID: 57, Revision: 58, Keys: 3, Waited: 1500 * time.Millisecond, Holders: 2}},
		{name: "lease_revoke_reply/no keys", msg: &protocol.LeaseRevokeReply{ID: 59}},
		{name: "lease_keep_alive", msg: &protocol.LeaseKeepAlive{ID: 60, Leases: []uint64{1, 0xab, math.MaxUint64}}},
		{name: "lease_keep_alive/nil leases", msg: &protocol.LeaseKeepAlive{ID: 61}},
		{name: "lease_keep_alive/empty leases", msg: &protocol.LeaseKeepAlive{ID: 62, Leases: []uint64{}}},
		{name: "lease_keep_alive_reply", msg: &protocol.LeaseKeepAliveReply{ID: 63,
			Renewed: []protocol.LeaseTTL{{Lease: 1, TTL: 10 * time.Second}, {Lease: math.MaxUint64, TTL: maxDuration}, {}},
			Unknown: []uint64{0xab, 0}}},
		{name: "lease_keep_alive_reply/nil lists", msg: &protocol.LeaseKeepAliveReply{ID: 64}},
		{
			name: "lease_keep_alive_reply/empty unknown is omitted",
			msg:  &protocol.LeaseKeepAliveReply{ID: 65, Renewed: []protocol.LeaseTTL{}, Unknown: []uint64{}},
			want: &protocol.LeaseKeepAliveReply{ID: 65, Renewed: []protocol.LeaseTTL{}},
		},
		{name: "lease_time_to_live", msg: &protocol.LeaseTimeToLive{ID: 66, Lease: 0x694d71ddacfda227, Keys: true}},
		{name: "lease_time_to_live/no keys", msg: &protocol.LeaseTimeToLive{ID: 67, Lease: math.MaxUint64}},
		{name: "lease_time_to_live_reply", msg: &protocol.LeaseTimeToLiveReply{ID: 68, Lease: 0x694d71ddacfda227,
			TTL: 52 * time.Second, GrantedTTL: 60 * time.Second, Keys: [][]byte{[]byte("foo"), binKey, bigKey}}},
		{name: "lease_time_to_live_reply/gone", msg: &protocol.LeaseTimeToLiveReply{ID: 69, Lease: 0xab, TTL: -1}},
		{name: "lease_list", msg: &protocol.LeaseList{ID: 70}},
		{name: "lease_list_reply", msg: &protocol.LeaseListReply{ID: 71, Leases: []protocol.LeaseTTL{
			{Lease: 1, TTL: time.Second}, {Lease: 0x694d71ddacfda227, TTL: minDuration}}}},
		{name: "lease_list_reply/nil leases", msg: &protocol.LeaseListReply{ID: 72}},
		{name: "lease_list_reply/empty leases", msg: &protocol.LeaseListReply{ID: 73, Leases: []protocol.LeaseTTL{}}},
		{name: "lease_list/after", msg: &protocol.LeaseList{ID: 74, After: math.MaxUint64}},
		{name: "lease_list_reply/more", msg: &protocol.LeaseListReply{ID: 75, Leases: []protocol.LeaseTTL{{Lease: 9, TTL: time.Minute}}, More: true}},
		{name: "list", msg: &protocol.List{ID: 76, Start: []byte("/svc/"), End: []byte("/svc0")}},
		{name: "list/page", msg: &protocol.List{ID: 77, Start: []byte("a"), After: []byte("a/b"), Limit: 100, KeysOnly: true}},
		{name: "list/everything", msg: &protocol.List{ID: 78}},
		{name: "list/leased", msg: &protocol.List{ID: 89, Start: []byte("d/"), End: []byte("d0"), Lease: true}},
		{name: "list_reply/leased", msg: &protocol.ListReply{ID: 90, Revision: 4, Term: 10 * time.Second, KVs: []protocol.KV{{Key: []byte("d/a"), Value: []byte("1"), Version: 4}}}},
		{name: "list/revalidate", msg: &protocol.List{ID: 91, Start: []byte("d/"), End: []byte("d0"), Lease: true, KeysOnly: true, Known: math.MaxUint64}},
		{name: "list_reply/unchanged", msg: &protocol.ListReply{ID: 92, Revision: 7, Term: 10 * time.Second, Unchanged: true}},
		{name: "list_reply", msg: &protocol.ListReply{ID: 79, Revision: 12, KVs: []protocol.KV{
			{Key: []byte("/svc/a"), Value: []byte("1"), Version: 3}, {Key: []byte("/svc/b"), Value: []byte{0, 0xff}, Version: 12}}}},
		{name: "list_reply/keys only, more", msg: &protocol.ListReply{ID: 80, Revision: 9, More: true, KVs: []protocol.KV{{Key: []byte("k"), Version: 9}}}},
		{name: "list_reply/empty", msg: &protocol.ListReply{ID: 81, Revision: math.MaxUint64}},
		{name: "list_reply/empty value, empty kvs", msg: &protocol.ListReply{ID: 82, KVs: []protocol.KV{{Key: []byte("e"), Value: []byte{}, Version: 1}}}},
		{name: "list_reply/no kvs", msg: &protocol.ListReply{ID: 83, KVs: []protocol.KV{}}, want: &protocol.ListReply{ID: 83}},
		{name: "txn/rename", msg: &protocol.Txn{ID: 84,
			If:   []protocol.Compare{{Key: []byte("/d/a"), Op: protocol.CmpExists}, {Key: []byte("/d/b"), Op: protocol.CmpAbsent}},
			Then: []protocol.TxnOp{{Op: protocol.OpPut, Key: []byte("/d/b"), Value: []byte("ino"), Token: 3, Lease: 9}, {Op: protocol.OpDelete, Key: []byte("/d/a")}},
			Else: []protocol.TxnOp{{Op: protocol.OpPut, Key: []byte("/d/c")}}, Timeout: time.Second, Acked: 7}},
		{name: "txn/compares", msg: &protocol.Txn{ID: 85, If: []protocol.Compare{
			{Key: []byte("k"), Op: protocol.CmpVersionGreater, Version: math.MaxUint64}, {Key: []byte("v"), Op: protocol.CmpValueNotEqual, Value: []byte{0, 0xff}}}}},
		{name: "txn/empty", msg: &protocol.Txn{ID: 86}},
		{name: "txn_reply", msg: &protocol.TxnReply{ID: 87, Succeeded: true, Revision: 12, Waited: time.Millisecond, Holders: 3}},
		{name: "txn_reply/else, duplicate", msg: &protocol.TxnReply{ID: 88, Revision: math.MaxUint64, Duplicate: true}},
		{name: "compact", msg: &protocol.Compact{ID: 89, Revision: 12}},
		{name: "compact_reply", msg: &protocol.CompactReply{ID: 89, Compacted: 12, Bytes: 4096, Events: 3}},
		{name: "watch", msg: &protocol.Watch{ID: 90, WatchID: 3, Start: []byte("/d/"), End: []byte("/d0"), From: 12, Prev: true, Progress: time.Second}},
		{name: "watch/from now", msg: &protocol.Watch{ID: 91, WatchID: 4, Start: []byte("k")}},
		{name: "watch_reply", msg: &protocol.WatchReply{ID: 90, WatchID: 3, From: 12, Compacted: 4}},
		{name: "watch_events", msg: &protocol.WatchEvents{WatchID: 3, Events: []protocol.WatchEvent{
			{Kind: 1, Key: []byte("/d/a"), Value: []byte("v"), Revision: 12, Lease: 7, PrevFound: true, PrevValue: []byte("u"), PrevRevision: 9},
			{Kind: 2, Key: []byte("/d/b"), Revision: 12}}, More: true, Revision: 12}},
		{name: "watch_events/progress", msg: &protocol.WatchEvents{WatchID: 3, Revision: 40}},
		{name: "watch_end", msg: &protocol.WatchEnd{WatchID: 3, Code: protocol.CodeCompacted, Message: "compacted", Compacted: 20}},
		{name: "watch_progress", msg: &protocol.WatchProgress{ID: 92, WatchID: 3}},
	}
}

func appendFrame(t testing.TB, dst []byte, m protocol.Message) []byte {
	t.Helper()
	out, err := protocol.AppendFrame(dst, m)
	if err != nil {
		t.Fatalf("AppendFrame(%T): %v", m, err)
	}
	return out
}

func header(n uint32) []byte {
	return binary.BigEndian.AppendUint32(nil, n)
}

func TestSamplesCoverEveryType(t *testing.T) {
	seen := make(map[protocol.Type]bool)
	for _, s := range samples() {
		seen[s.msg.Type()] = true
	}
	for i := 1; i < protocol.NumTypes; i++ {
		if !seen[protocol.Type(i)] {
			t.Errorf("no sample of type %s (%d)", protocol.Type(i), i)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	for _, s := range samples() {
		t.Run(s.name, func(t *testing.T) {
			prefix := []byte("prefix")
			frame := appendFrame(t, bytes.Clone(prefix), s.msg)
			if !bytes.HasPrefix(frame, prefix) {
				t.Fatalf("AppendFrame changed the bytes before dst's end: %q", frame[:len(prefix)])
			}
			frame = frame[len(prefix):]
			if n := binary.BigEndian.Uint32(frame); int(n) != len(frame)-4 {
				t.Fatalf("header declares %d bytes, frame has %d after it", n, len(frame)-4)
			}
			if got := protocol.Type(frame[4]); got != s.msg.Type() {
				t.Fatalf("type byte = %s, want %s", got, s.msg.Type())
			}
			if len(frame)-4 > protocol.DefaultMaxFrameSize {
				t.Fatalf("frame of %d bytes is over DefaultMaxFrameSize %d", len(frame)-4, protocol.DefaultMaxFrameSize)
			}

			// Through a FrameReader with the default limit.
			fr := protocol.NewFrameReader(bytes.NewReader(frame), 0)
			got, err := fr.ReadMessage()
			if err != nil {
				t.Fatalf("ReadMessage: %v", err)
			}
			if want := s.expected(); !reflect.DeepEqual(got, want) {
				t.Fatalf("round trip mismatch\n got %#v\nwant %#v", got, want)
			}
			if _, err := fr.ReadMessage(); err != io.EOF {
				t.Fatalf("after the only frame: err = %v, want io.EOF", err)
			}

			// Decode of the body alone gives the same.
			got, err = protocol.Decode(protocol.Type(frame[4]), frame[5:])
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if want := s.expected(); !reflect.DeepEqual(got, want) {
				t.Fatalf("Decode mismatch\n got %#v\nwant %#v", got, want)
			}
		})
	}
}

// TestDefaultMaxFrameSizeFitsLimits checks the documented budget: a write
// of a 1 MiB value under a 4 KiB key, with every other field at its widest,
// fits in DefaultMaxFrameSize, as do the replies that carry such a value.
func TestDefaultMaxFrameSizeFitsLimits(t *testing.T) {
	key := bytes.Repeat([]byte{0xff}, protocol.MaxKeySize)
	value := bytes.Repeat([]byte{0xee}, 1<<20)
	msgs := []protocol.Message{
		&protocol.Write{ID: math.MaxUint64, Op: protocol.OpCAS, Key: key, Value: value, Expect: math.MaxUint64, Token: math.MaxUint64, Timeout: minDuration},
		&protocol.GetReply{ID: math.MaxUint64, Found: true, Unchanged: true, Value: value, Version: math.MaxUint64, Term: minDuration},
		&protocol.AcquireReply{ID: math.MaxUint64, Token: math.MaxUint64, Term: minDuration, Found: true, Value: value, Version: math.MaxUint64},
	}
	for _, m := range msgs {
		frame := appendFrame(t, nil, m)
		if n := len(frame) - 4; n > protocol.DefaultMaxFrameSize {
			t.Errorf("%s: frame of %d bytes > DefaultMaxFrameSize %d", m.Type(), n, protocol.DefaultMaxFrameSize)
		}
		got, err := protocol.NewFrameReader(bytes.NewReader(frame), -1).ReadMessage()
		if err != nil {
			t.Fatalf("%s: ReadMessage: %v", m.Type(), err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Errorf("%s: round trip mismatch", m.Type())
		}
	}
}

// TestStream appends every sample to one buffer and reads them back in
// order, then io.EOF. The messages are compared only after the whole stream
// has been read, so a decoded message that shared memory with the reader's
// frame buffer would show up as corrupted.
func TestStream(t *testing.T) {
	ss := samples()
	var buf []byte
	for _, s := range ss {
		buf = appendFrame(t, buf, s.msg)
	}
	readers := map[string]func() io.Reader{
		"whole":    func() io.Reader { return bytes.NewReader(buf) },
		"one byte": func() io.Reader { return iotest.OneByteReader(bytes.NewReader(buf)) },
		"half":     func() io.Reader { return iotest.HalfReader(bytes.NewReader(buf)) },
		"data+eof": func() io.Reader { return iotest.DataErrReader(bytes.NewReader(buf)) },
	}
	for name, newReader := range readers {
		t.Run(name, func(t *testing.T) {
			fr := protocol.NewFrameReader(newReader(), 0)
			var got []protocol.Message
			for range ss {
				m, err := fr.ReadMessage()
				if err != nil {
					t.Fatalf("message %d: %v", len(got), err)
				}
				got = append(got, m)
			}
			for i := 0; i < 3; i++ {
				if m, err := fr.ReadMessage(); err != io.EOF || m != nil {
					t.Fatalf("after the last frame: %v, %v; want nil, io.EOF", m, err)
				}
			}
			for i, s := range ss {
				if !reflect.DeepEqual(got[i], s.expected()) {
					t.Errorf("message %d (%s) mismatch\n got %#v\nwant %#v", i, s.name, got[i], s.expected())
				}
			}
		})
	}
}

func TestTypes(t *testing.T) {
	if protocol.NumTypes != 52 {
		t.Errorf("NumTypes = %d, want 52", protocol.NumTypes)
	}
	names := make(map[string]protocol.Type)
	for i := 1; i < protocol.NumTypes; i++ {
		typ := protocol.Type(i)
		m := protocol.New(typ)
		if m == nil {
			t.Errorf("New(%d) = nil", i)
			continue
		}
		if m.Type() != typ {
			t.Errorf("New(%d).Type() = %d", i, m.Type())
		}
		if reflect.TypeOf(m).Kind() != reflect.Pointer || !reflect.ValueOf(m).Elem().IsZero() {
			t.Errorf("New(%d) = %#v, want a pointer to a zero message", i, m)
		}
		if m2 := protocol.New(typ); m2 == m {
			t.Errorf("New(%d) returned the same message twice", i)
		}
		if !typ.Valid() {
			t.Errorf("Type(%d).Valid() = false", i)
		}
		name := typ.String()
		if name == "unknown" || name == "" {
			t.Errorf("Type(%d).String() = %q", i, name)
		}
		if prev, dup := names[name]; dup {
			t.Errorf("Type(%d) and Type(%d) share the name %q", prev, i, name)
		}
		names[name] = typ
	}
	for _, typ := range []protocol.Type{0, protocol.Type(protocol.NumTypes), protocol.Type(protocol.NumTypes + 1), 255} {
		if typ.Valid() {
			t.Errorf("Type(%d).Valid() = true", typ)
		}
		if s := typ.String(); s != "unknown" {
			t.Errorf("Type(%d).String() = %q, want unknown", typ, s)
		}
		if m := protocol.New(typ); m != nil {
			t.Errorf("New(%d) = %#v, want nil", typ, m)
		}
		for _, body := range [][]byte{{0x80}, {0xc0}, nil} {
			m, err := protocol.Decode(typ, body)
			if !errors.Is(err, protocol.ErrMalformed) || m != nil {
				t.Errorf("Decode(%d, % x) = %v, %v; want nil, ErrMalformed", typ, body, m, err)
			}
		}
		// Also through a FrameReader.
		frame := append(header(2), byte(typ), 0x80)
		if _, err := protocol.NewFrameReader(bytes.NewReader(frame), 0).ReadMessage(); !errors.Is(err, protocol.ErrMalformed) {
			t.Errorf("ReadMessage of a frame of type %d: %v, want ErrMalformed", typ, err)
		}
	}
	// Spot checks of the names used in stats.
	for typ, want := range map[protocol.Type]string{
		protocol.TypeHello: "hello", protocol.TypeGetReply: "get_reply", protocol.TypeReleaseWrite: "release_write",
		protocol.TypeOK: "ok", protocol.TypeRecall: "recall",
	} {
		if got := typ.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", typ, got, want)
		}
	}
}

func TestRequestID(t *testing.T) {
	noID := map[protocol.Type]bool{
		protocol.TypeHello: true, protocol.TypeHelloReply: true, protocol.TypeAck: true,
		protocol.TypeInvalidate: true, protocol.TypeRecall: true, protocol.TypeWatchEvents: true, protocol.TypeWatchEnd: true,
	}
	for i := 1; i < protocol.NumTypes; i++ {
		typ := protocol.Type(i)
		m := protocol.New(typ)
		f := reflect.ValueOf(m).Elem().FieldByName("ID")
		if noID[typ] {
			if f.IsValid() {
				t.Errorf("%s has an ID field but is listed as having none", typ)
			}
			if id, ok := protocol.RequestID(m); ok || id != 0 {
				t.Errorf("RequestID(%s) = %d, %v; want 0, false", typ, id, ok)
			}
			if protocol.SetRequestID(m, 9) {
				t.Errorf("SetRequestID(%s) reports an ID field", typ)
			}
			continue
		}
		if !f.IsValid() {
			t.Errorf("%s has no ID field", typ)
			continue
		}
		for _, want := range []uint64{0, 1, 0xdeadbeef, math.MaxUint64} {
			if !protocol.SetRequestID(m, want) || f.Uint() != want {
				t.Errorf("SetRequestID(%s, %d) left ID %d", typ, want, f.Uint())
			}
			f.SetUint(want)
			if id, ok := protocol.RequestID(m); !ok || id != want {
				t.Errorf("RequestID(%s with ID %d) = %d, %v", typ, want, id, ok)
			}
		}
	}
	if id, ok := protocol.RequestID(nil); ok || id != 0 {
		t.Errorf("RequestID(nil) = %d, %v; want 0, false", id, ok)
	}
}

// repeatReader returns its bytes again and again, forever.
type repeatReader struct {
	b   []byte
	off int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		c := copy(p[n:], r.b[r.off:])
		n += c
		r.off = (r.off + c) % len(r.b)
	}
	return n, nil
}

// TestFrameTooLargeDoesNotAllocate reads headers declaring 4 GiB - 1 with a
// limit of 1 KiB: each read must fail with ErrFrameTooLarge after a few
// small allocations for the error, never the frame.
func TestFrameTooLargeDoesNotAllocate(t *testing.T) {
	fr := protocol.NewFrameReader(&repeatReader{b: header(math.MaxUint32)}, 1024)
	read := func() {
		_, _, err := fr.ReadFrame()
		if !errors.Is(err, protocol.ErrFrameTooLarge) {
			t.Fatalf("ReadFrame: %v, want ErrFrameTooLarge", err)
		}
	}
	read() // let bufio fill its buffer outside the measurement

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	allocs := testing.AllocsPerRun(100, read)
	runtime.ReadMemStats(&after)
	t.Logf("%v allocations, %d bytes per rejected frame", allocs, (after.TotalAlloc-before.TotalAlloc)/101)
	if allocs > 8 {
		t.Errorf("ReadFrame of an oversized frame: %v allocations per call, want at most 8", allocs)
	}
	// 101 calls; a frame buffer would be 4 GiB each.
	if total := after.TotalAlloc - before.TotalAlloc; total > 1<<20 {
		t.Errorf("101 rejected frames allocated %d bytes in total", total)
	}

	// ReadMessage too.
	fr2 := protocol.NewFrameReader(&repeatReader{b: header(math.MaxUint32)}, 1024)
	if _, err := fr2.ReadMessage(); !errors.Is(err, protocol.ErrFrameTooLarge) {
		t.Fatalf("ReadMessage: %v, want ErrFrameTooLarge", err)
	}
}

// headerOnlyReader returns one frame header and then counts further reads,
// which a reader that rejects the header must not make.
type headerOnlyReader struct {
	hdr   []byte
	reads int
}

func (r *headerOnlyReader) Read(p []byte) (int, error) {
	r.reads++
	if r.reads > 1 {
		return 0, errors.New("read past the header")
	}
	return copy(p, r.hdr), nil
}

func TestFrameTooLargeReadsNoFurther(t *testing.T) {
	for _, n := range []uint32{1025, 1 << 20, math.MaxUint32} {
		r := &headerOnlyReader{hdr: header(n)}
		fr := protocol.NewFrameReader(r, 1024)
		_, body, err := fr.ReadFrame()
		if !errors.Is(err, protocol.ErrFrameTooLarge) || body != nil {
			t.Errorf("header %d: body %d bytes, err %v; want ErrFrameTooLarge", n, len(body), err)
		}
		if r.reads != 1 {
			t.Errorf("header %d: %d reads of the underlying reader, want 1", n, r.reads)
		}
	}
}

func TestFrameLimit(t *testing.T) {
	for _, max := range []int{1, 2, 5, 1024, 64<<10 - 1, 64 << 10, 64<<10 + 1, 1 << 20} {
		t.Run(fmt.Sprint(max), func(t *testing.T) {
			body := make([]byte, max-1)
			for i := range body {
				body[i] = byte(i)
			}
			atLimit := append(append(header(uint32(max)), byte(protocol.TypeGet)), body...)
			typ, got, err := protocol.NewFrameReader(bytes.NewReader(atLimit), max).ReadFrame()
			if err != nil {
				t.Fatalf("frame of exactly the limit: %v", err)
			}
			if typ != protocol.TypeGet || !bytes.Equal(got, body) {
				t.Fatalf("frame of exactly the limit read back as type %d, %d bytes", typ, len(got))
			}

			over := append(append(header(uint32(max+1)), byte(protocol.TypeGet)), body...)
			over = append(over, 0)
			_, _, err = protocol.NewFrameReader(bytes.NewReader(over), max).ReadFrame()
			if !errors.Is(err, protocol.ErrFrameTooLarge) {
				t.Fatalf("frame of limit+1: %v, want ErrFrameTooLarge", err)
			}
			if errors.Is(err, protocol.ErrMalformed) {
				t.Fatalf("ErrFrameTooLarge also matches ErrMalformed: %v", err)
			}
		})
	}
}

// TestMessageAtLimit reads a real message whose frame is exactly the limit,
// and the same message with a limit one byte smaller.
func TestMessageAtLimit(t *testing.T) {
	m := &protocol.Write{ID: 1, Op: protocol.OpPut, Key: []byte("k"), Value: bytes.Repeat([]byte("v"), 3000)}
	frame := appendFrame(t, nil, m)
	size := len(frame) - 4
	got, err := protocol.NewFrameReader(bytes.NewReader(frame), size).ReadMessage()
	if err != nil || !reflect.DeepEqual(got, m) {
		t.Fatalf("at the limit: %v, %v", got, err)
	}
	if _, err := protocol.NewFrameReader(bytes.NewReader(frame), size-1).ReadMessage(); !errors.Is(err, protocol.ErrFrameTooLarge) {
		t.Fatalf("one byte over the limit: %v, want ErrFrameTooLarge", err)
	}
}

func TestDefaultLimit(t *testing.T) {
	for _, max := range []int{0, -1, math.MinInt} {
		at := append(header(protocol.DefaultMaxFrameSize), byte(protocol.TypeOK))
		at = append(at, make([]byte, protocol.DefaultMaxFrameSize-1)...)
		if _, _, err := protocol.NewFrameReader(bytes.NewReader(at), max).ReadFrame(); err != nil {
			t.Errorf("max %d: frame of DefaultMaxFrameSize: %v", max, err)
		}
		over := header(protocol.DefaultMaxFrameSize + 1)
		if _, _, err := protocol.NewFrameReader(bytes.NewReader(over), max).ReadFrame(); !errors.Is(err, protocol.ErrFrameTooLarge) {
			t.Errorf("max %d: frame of DefaultMaxFrameSize+1: %v, want ErrFrameTooLarge", max, err)
		}
	}
}

func TestEmptyFrame(t *testing.T) {
	fr := protocol.NewFrameReader(bytes.NewReader(header(0)), 0)
	if _, _, err := fr.ReadFrame(); !errors.Is(err, protocol.ErrMalformed) {
		t.Fatalf("zero-length frame: %v, want ErrMalformed", err)
	}
	fr = protocol.NewFrameReader(bytes.NewReader(header(0)), 0)
	if _, err := fr.ReadMessage(); !errors.Is(err, protocol.ErrMalformed) {
		t.Fatalf("zero-length frame via ReadMessage: %v, want ErrMalformed", err)
	}
}

func TestTruncated(t *testing.T) {
	valid := appendFrame(t, nil, &protocol.Get{ID: 1, Key: []byte("key")})
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	tests := []struct {
		name  string
		input []byte
		good  int // complete frames before the failure
	}{
		{"header 1 byte", []byte{0}, 0},
		{"header 2 bytes", []byte{0, 0}, 0},
		{"header 3 bytes", []byte{0, 0, 1}, 0},
		{"body missing", header(5), 0},
		{"body 1 of 5", cat(header(5), []byte{byte(protocol.TypeOK)}), 0},
		{"body 4 of 5", cat(header(5), []byte{1, 2, 3, 4}), 0},
		{"valid frame minus 1", valid[:len(valid)-1], 0},
		{"after a frame: header 3 bytes", cat(valid, []byte{0, 0, 0}), 1},
		{"after a frame: body missing", cat(valid, header(9)), 1},
		{"after a frame: half a frame", cat(valid, valid[:len(valid)/2]), 1},
	}
	for _, tt := range tests {
		for _, oneByte := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/onebyte=%v", tt.name, oneByte), func(t *testing.T) {
				var r io.Reader = bytes.NewReader(tt.input)
				if oneByte {
					r = iotest.OneByteReader(r)
				}
				fr := protocol.NewFrameReader(r, 0)
				for i := 0; i < tt.good; i++ {
					if _, err := fr.ReadMessage(); err != nil {
						t.Fatalf("frame %d: %v", i, err)
					}
				}
				_, body, err := fr.ReadFrame()
				if err == nil {
					t.Fatalf("truncated frame read as %d bytes", len(body))
				}
				if err == io.EOF || errors.Is(err, io.EOF) {
					t.Fatalf("truncated frame: %v; io.EOF is only for a clean end", err)
				}
				if !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("truncated frame: %v, want io.ErrUnexpectedEOF", err)
				}
			})
		}
	}

	// A clean end, at the start or after whole frames, is exactly io.EOF.
	for _, input := range [][]byte{nil, valid, cat(valid, valid)} {
		fr := protocol.NewFrameReader(bytes.NewReader(input), 0)
		for i := 0; i < len(input)/len(valid); i++ {
			if _, err := fr.ReadMessage(); err != nil {
				t.Fatal(err)
			}
		}
		if typ, body, err := fr.ReadFrame(); err != io.EOF || typ != 0 || body != nil {
			t.Errorf("clean end after %d bytes: %d, %q, %v; want io.EOF", len(input), typ, body, err)
		}
	}
}

func TestReaderError(t *testing.T) {
	boom := errors.New("boom")
	valid := appendFrame(t, nil, &protocol.OK{ID: 1})
	for cut := 0; cut <= len(valid); cut++ {
		r := io.MultiReader(bytes.NewReader(valid[:cut]), iotest.ErrReader(boom))
		fr := protocol.NewFrameReader(r, 0)
		if cut == len(valid) {
			if _, err := fr.ReadMessage(); err != nil {
				t.Fatalf("whole frame: %v", err)
			}
		}
		if _, _, err := fr.ReadFrame(); !errors.Is(err, boom) {
			t.Errorf("error after %d bytes: %v, want boom", cut, err)
		}
	}
}

// TestBufferReuse reads frames of varied sizes around the 64 KiB point at
// which FrameReader drops a large buffer, checking every body.
func TestBufferReuse(t *testing.T) {
	sizes := []int{1, 100 << 10, 10, 100 << 10, 70000, 64 << 10, 64<<10 + 1, 5, 1 << 20, 1 << 20, 3}
	var stream []byte
	var bodies [][]byte
	for i, n := range sizes {
		body := bytes.Repeat([]byte{byte(i + 1)}, n-1)
		bodies = append(bodies, body)
		stream = append(stream, header(uint32(n))...)
		stream = append(stream, byte(i+1))
		stream = append(stream, body...)
	}
	fr := protocol.NewFrameReader(bytes.NewReader(stream), 1<<20)
	for i := range sizes {
		typ, body, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if typ != protocol.Type(i+1) || !bytes.Equal(body, bodies[i]) {
			t.Fatalf("frame %d: type %d, %d bytes; want type %d, %d bytes", i, typ, len(body), i+1, len(bodies[i]))
		}
	}
	if _, _, err := fr.ReadFrame(); err != io.EOF {
		t.Fatalf("end: %v, want io.EOF", err)
	}
}

// msgpack bodies used by the Decode tests.
var (
	validGetBody = func() []byte {
		f, _ := protocol.AppendFrame(nil, &protocol.Get{ID: 1, Key: []byte("k")})
		return f[5:]
	}()
	validOKBody = func() []byte {
		f, _ := protocol.AppendFrame(nil, &protocol.OK{ID: 1})
		return f[5:]
	}()
)

// mapBody returns a msgpack map of one entry with the fixstr key k and the
// raw msgpack value v.
func mapBody(k string, v ...byte) []byte {
	return append(append([]byte{0x81, 0xa0 | byte(len(k))}, k...), v...)
}

// safeDecode calls Decode and turns a panic into a test failure.
func safeDecode(t *testing.T, typ protocol.Type, body []byte) (m protocol.Message, err error) {
	t.Helper()
	defer func() {
		if p := recover(); p != nil {
			t.Fatalf("Decode(%s, % x) panicked: %v", typ, body, p)
		}
	}()
	return protocol.Decode(typ, body)
}

func TestDecodeRejects(t *testing.T) {
	tests := []struct {
		name string
		typ  protocol.Type
		body []byte
	}{
		{"empty body", protocol.TypeGet, nil},
		{"empty body ok", protocol.TypeOK, []byte{}},
		{"trailing nil", protocol.TypeGet, append(bytes.Clone(validGetBody), 0xc0)},
		{"trailing zero", protocol.TypeOK, append(bytes.Clone(validOKBody), 0x00)},
		{"trailing message", protocol.TypeOK, append(bytes.Clone(validOKBody), validOKBody...)},
		{"trailing garbage", protocol.TypeGet, append(bytes.Clone(validGetBody), 0xc1, 0xff)},
		{"string for uint64", protocol.TypeGet, mapBody("i", 0xa1, 'x')},
		{"string for uint16", protocol.TypeHello, mapBody("v", 0xa1, '1')},
		{"string for duration", protocol.TypeGetReply, mapBody("t", 0xa2, '1', 's')},
		{"string for int", protocol.TypeHelloReply, mapBody("mk", 0xa1, '1')},
		{"map for uint64", protocol.TypeOK, mapBody("i", 0x80)},
		{"array for bool", protocol.TypeGet, mapBody("r", 0x90)},
		{"string for keys", protocol.TypeRenew, mapBody("k", 0xa1, 'x')},
		{"bool in keys", protocol.TypeAck, mapBody("k", 0x91, 0xc3)},
		{"string in terms", protocol.TypeRenewReply, mapBody("t", 0x91, 0xa1, 'x')},
		{"array for map", protocol.TypeStatsReply, mapBody("mi", 0x91, 0x01)},
		{"string map value", protocol.TypeStatsReply, mapBody("mi", 0x81, 0xa1, 'g', 0xa1, 'x')},
		{"string for message", protocol.TypeHello, []byte{0xa5, 'h', 'e', 'l', 'l', 'o'}},
		{"int for message", protocol.TypeOK, []byte{0x01}},
		{"bool for message", protocol.TypeCancel, []byte{0xc3}},
		{"never-used code", protocol.TypeOK, []byte{0xc1}},
		{"never-used code in field", protocol.TypeOK, mapBody("i", 0xc1)},
		{"truncated map", protocol.TypeGet, []byte{0x82, 0xa1, 'i', 0x01}},
		{"truncated key", protocol.TypeGet, mapBody("k", 0xc4, 0x05, 'a', 'b')},
		{"truncated uint64", protocol.TypeGet, mapBody("i", 0xcf, 0, 0, 0)},
		{"truncated field name", protocol.TypeGet, []byte{0x81, 0xa5, 'i'}},
		{"garbage", protocol.TypeWrite, []byte{0xde, 0xad, 0xbe, 0xef}},
		{"all ones", protocol.TypeStatsReply, bytes.Repeat([]byte{0xff}, 16)},
		{"all 0xdd", protocol.TypeRenew, bytes.Repeat([]byte{0xdd}, 16)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := safeDecode(t, tt.typ, tt.body)
			if !errors.Is(err, protocol.ErrMalformed) {
				t.Fatalf("Decode(%s, % x) = %#v, %v; want ErrMalformed", tt.typ, tt.body, m, err)
			}
			if m != nil {
				t.Fatalf("Decode returned a message with its error: %#v", m)
			}
			// The same body in a frame.
			frame := append(append(header(uint32(len(tt.body)+1)), byte(tt.typ)), tt.body...)
			if _, err := protocol.NewFrameReader(bytes.NewReader(frame), 0).ReadMessage(); !errors.Is(err, protocol.ErrMalformed) {
				t.Fatalf("ReadMessage: %v, want ErrMalformed", err)
			}
		})
	}
}

// TestDecodeHugeDeclaredLength sends bodies of a few bytes that declare
// millions of array elements, map entries or bytes. Decode must reject them
// without allocating for the declared length: msgpack v5.4.1 allocates a
// slice for an array's declared length up front (and a []byte for a bin's),
// so before Decode skipped the body first, 0xFFFFFFFF keys made it allocate
// 96 GiB and crash the process. The lengths here but the last two are
// smaller, so that a regression fails those cases rather than killing the
// test binary.
func TestDecodeHugeDeclaredLength(t *testing.T) {
	arr32 := []byte{0xdd, 0x00, 0x80, 0x00, 0x00} // 8 Mi elements
	map32 := []byte{0xdf, 0x00, 0x80, 0x00, 0x00} // 8 Mi entries
	bin32 := []byte{0xc6, 0x10, 0x00, 0x00, 0x00} // 256 MiB
	str32 := []byte{0xdb, 0x10, 0x00, 0x00, 0x00} // 256 MiB
	tests := []struct {
		name string
		typ  protocol.Type
		body []byte
	}{
		{"renew keys", protocol.TypeRenew, mapBody("k", arr32...)},
		{"release keys", protocol.TypeRelease, mapBody("k", arr32...)},
		{"ack keys", protocol.TypeAck, mapBody("k", arr32...)},
		{"invalidate keys", protocol.TypeInvalidate, mapBody("k", arr32...)},
		{"renew keys, some present", protocol.TypeRenew, mapBody("k", append(bytes.Clone(arr32), 0xc4, 1, 'a', 0xc4, 1, 'b')...)},
		{"renew_reply terms", protocol.TypeRenewReply, mapBody("t", arr32...)},
		{"stats_reply map", protocol.TypeStatsReply, mapBody("mi", map32...)},
		{"message map", protocol.TypeOK, map32},
		{"unknown field array", protocol.TypeOK, mapBody("zz", arr32...)},
		{"get key", protocol.TypeGet, mapBody("k", bin32...)},
		{"write value", protocol.TypeWrite, mapBody("val", bin32...)},
		{"key in keys", protocol.TypeAck, mapBody("k", append([]byte{0x91}, bin32...)...)},
		{"hello client", protocol.TypeHello, mapBody("c", str32...)},
		{"error message", protocol.TypeError, mapBody("m", str32...)},
		{"max uint32 keys", protocol.TypeRenew, mapBody("k", 0xdd, 0xff, 0xff, 0xff, 0xff)},
		{"max uint32 key", protocol.TypeGet, mapBody("k", 0xc6, 0xff, 0xff, 0xff, 0xff)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			m, err := safeDecode(t, tt.typ, tt.body)
			runtime.ReadMemStats(&after)
			if !errors.Is(err, protocol.ErrMalformed) || m != nil {
				t.Fatalf("Decode = %v, %v; want ErrMalformed", m, err)
			}
			if total := after.TotalAlloc - before.TotalAlloc; total > 64<<10 {
				t.Fatalf("Decode of a %d-byte body allocated %d bytes", len(tt.body), total)
			}
		})
	}
}

// TestDecodeRepeatedHugeString decodes, again and again, a body declaring a
// 4 GiB string. msgpack reads strings through a buffer that its pooled
// decoder keeps, and grows it by a megabyte towards the declared length on
// every attempt; before Decode checked lengths first, 200 such 8-byte
// bodies declaring 4 GiB grew the heap to 12 GiB. The bodies here declare
// 256 MiB, so that a regression fails the test rather than killing it.
func TestDecodeRepeatedHugeString(t *testing.T) {
	bodies := map[protocol.Type][]byte{
		protocol.TypeHello: mapBody("c", 0xdb, 0x10, 0x00, 0x00, 0x00),
		protocol.TypeError: mapBody("m", 0xdb, 0x10, 0x00, 0x00, 0x00),
		protocol.TypeGet:   mapBody("zz", 0xc6, 0x10, 0x00, 0x00, 0x00),
	}
	for typ, body := range bodies {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for i := 0; i < 50; i++ {
			if _, err := safeDecode(t, typ, body); !errors.Is(err, protocol.ErrMalformed) {
				t.Fatalf("%s: %v, want ErrMalformed", typ, err)
			}
		}
		runtime.ReadMemStats(&after)
		if total := after.TotalAlloc - before.TotalAlloc; total > 1<<20 {
			t.Errorf("%s: 50 decodes of a %d-byte body allocated %d bytes", typ, len(body), total)
		}
	}
}

// nested returns a msgpack value of n arrays, one in another, around nil.
func nested(n int) []byte {
	return append(bytes.Repeat([]byte{0x91}, n), 0xc0)
}

// TestDecodeNesting checks that arrays and maps nested deeper than any
// message needs are refused before msgpack recurses into them: a 1 MiB body
// of nested arrays made msgpack's skip of an unknown field grow the stack by
// 128 MiB.
func TestDecodeNesting(t *testing.T) {
	// The message's map is one level; 31 more are accepted (in an unknown
	// field, which msgpack skips), 32 more are not.
	if m, err := safeDecode(t, protocol.TypeOK, mapBody("zz", nested(31)...)); err != nil {
		t.Errorf("32 levels: %v", err)
	} else if !reflect.DeepEqual(m, &protocol.OK{}) {
		t.Errorf("32 levels: %#v", m)
	}
	for _, n := range []int{32, 1000, protocol.DefaultMaxFrameSize - 10} {
		start := time.Now()
		if _, err := safeDecode(t, protocol.TypeOK, mapBody("zz", nested(n)...)); !errors.Is(err, protocol.ErrMalformed) {
			t.Errorf("%d levels: %v, want ErrMalformed", n+1, err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("%d levels: took %v", n+1, d)
		}
	}
	// Deep nesting where the message expects keys.
	if _, err := safeDecode(t, protocol.TypeRenew, mapBody("k", nested(100000)...)); !errors.Is(err, protocol.ErrMalformed) {
		t.Errorf("nested keys: %v, want ErrMalformed", err)
	}
}

// rawValues returns one valid msgpack encoding for every code byte but the
// never-used 0xc1, each with data or elements where the code takes them.
func rawValues() [][]byte {
	var vals [][]byte
	for c := 0; c <= 0xff; c++ {
		code := byte(c)
		var v []byte
		switch {
		case c <= 0x7f || c >= 0xe0, c == 0xc0, c == 0xc2, c == 0xc3:
			v = []byte{code}
		case c <= 0x8f: // fixmap of c&0xf entries of fixints
			v = append([]byte{code}, bytes.Repeat([]byte{0x01}, 2*(c&0x0f))...)
		case c <= 0x9f:
			v = append([]byte{code}, bytes.Repeat([]byte{0x01}, c&0x0f)...)
		case c <= 0xbf:
			v = append([]byte{code}, strings.Repeat("s", c&0x1f)...)
		case c == 0xc1:
			continue
		case c == 0xcc, c == 0xd0:
			v = []byte{code, 0x7f}
		case c == 0xcd, c == 0xd1:
			v = []byte{code, 0x7f, 0xff}
		case c == 0xca, c == 0xce, c == 0xd2:
			v = []byte{code, 0x7f, 0xff, 0xff, 0xff}
		case c == 0xcb, c == 0xcf, c == 0xd3:
			v = []byte{code, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0}
		case c >= 0xd4 && c <= 0xd8: // fixext: type 5 and 1<<(c-0xd4) bytes
			v = append([]byte{code, 5}, bytes.Repeat([]byte{0xee}, 1<<(c-0xd4))...)
		case c == 0xc4, c == 0xd9:
			v = []byte{code, 3, 'a', 'b', 'c'}
		case c == 0xc5, c == 0xda:
			v = append([]byte{code, 0x01, 0x00}, bytes.Repeat([]byte{'x'}, 256)...)
		case c == 0xc6, c == 0xdb:
			v = append([]byte{code, 0, 1, 0, 0}, bytes.Repeat([]byte{'x'}, 65536)...)
		case c == 0xc7:
			v = []byte{code, 3, 9, 'a', 'b', 'c'}
		case c == 0xc8:
			v = []byte{code, 0, 3, 9, 'a', 'b', 'c'}
		case c == 0xc9:
			v = []byte{code, 0, 0, 0, 3, 9, 'a', 'b', 'c'}
		case c == 0xdc:
			v = []byte{code, 0, 3, 0x01, 0xc0, 0x91, 0x80}
		case c == 0xdd:
			v = []byte{code, 0, 0, 0, 3, 0x01, 0xc0, 0x91, 0x80}
		case c == 0xde:
			v = []byte{code, 0, 2, 0xa1, 'a', 0x90, 0x01, 0x81, 0x02, 0xc3}
		case c == 0xdf:
			v = []byte{code, 0, 0, 0, 2, 0xa1, 'a', 0x90, 0x01, 0x81, 0x02, 0xc3}
		}
		vals = append(vals, v)
	}
	return vals
}

// TestDecodeEveryMsgpackCode puts a value of every msgpack code in a field
// the message does not have, which msgpack skips: Decode must accept each,
// so its length checks size every code as msgpack does, and must refuse it
// cut short by a byte.
func TestDecodeEveryMsgpackCode(t *testing.T) {
	for _, v := range rawValues() {
		// Cross-check the sample value with msgpack itself.
		r := bytes.NewReader(v)
		if err := msgpack.NewDecoder(r).Skip(); err != nil || r.Len() != 0 {
			t.Fatalf("bad test value % x: %v, %d left", v[:min(len(v), 8)], err, r.Len())
		}
		body := append([]byte{0x82, 0xa1, 'i', 0x07, 0xa2, 'z', 'z'}, v...)
		m, err := safeDecode(t, protocol.TypeOK, body)
		if err != nil || !reflect.DeepEqual(m, &protocol.OK{ID: 7}) {
			t.Errorf("code %#x: %#v, %v", v[0], m, err)
		}
		if _, err := safeDecode(t, protocol.TypeOK, body[:len(body)-1]); !errors.Is(err, protocol.ErrMalformed) {
			t.Errorf("code %#x cut short: %v, want ErrMalformed", v[0], err)
		}
		if _, err := safeDecode(t, protocol.TypeOK, append(body, 0xc0)); !errors.Is(err, protocol.ErrMalformed) {
			t.Errorf("code %#x with a trailing byte: %v, want ErrMalformed", v[0], err)
		}
	}
}

// TestDecodeGarbage feeds random and mutated bodies of every type to Decode:
// it must never panic, and every error must wrap ErrMalformed.
func TestDecodeGarbage(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var valid [][]byte
	for _, s := range samples() {
		f := appendFrame(t, nil, s.msg)
		if len(f) < 4096 {
			valid = append(valid, f[5:])
		}
	}
	iters := 3000
	if testing.Short() {
		iters = 300
	}
	for i := 0; i < iters; i++ {
		var body []byte
		if i%2 == 0 {
			body = make([]byte, rng.IntN(48))
			for j := range body {
				body[j] = byte(rng.Uint32())
			}
		} else {
			body = bytes.Clone(valid[rng.IntN(len(valid))])
			for k := rng.IntN(4) + 1; k > 0 && len(body) > 0; k-- {
				body[rng.IntN(len(body))] = byte(rng.Uint32())
			}
			if rng.IntN(4) == 0 {
				body = body[:rng.IntN(len(body)+1)]
			}
		}
		for typ := 0; typ <= protocol.NumTypes; typ++ {
			m, err := safeDecode(t, protocol.Type(typ), body)
			if err != nil {
				if !errors.Is(err, protocol.ErrMalformed) || m != nil {
					t.Fatalf("Decode(%d, % x) = %v, %v; want an error wrapping ErrMalformed", typ, body, m, err)
				}
				continue
			}
			if m.Type() != protocol.Type(typ) {
				t.Fatalf("Decode(%d) returned a %s", typ, m.Type())
			}
		}
	}
}

func TestCode(t *testing.T) {
	want := []struct {
		code protocol.Code
		name string
	}{
		{protocol.CodeOK, "ok"},
		{protocol.CodeNotFound, "not found"},
		{protocol.CodeVersionMismatch, "version mismatch"},
		{protocol.CodeFenced, "fenced"},
		{protocol.CodeTooLarge, "too large"},
		{protocol.CodeInvalidArgument, "invalid argument"},
		{protocol.CodeUnavailable, "unavailable"},
		{protocol.CodeResourceExhausted, "resource exhausted"},
		{protocol.CodePermissionDenied, "permission denied"},
		{protocol.CodeProtocol, "protocol error"},
		{protocol.CodeClosed, "closed"},
		{protocol.CodeInternal, "internal error"},
		{protocol.CodeCanceled, "canceled"},
		{protocol.CodeNotLeader, "not the leader"},
		{protocol.CodeCompacted, "compacted"},
		{protocol.CodeLocked, "locked"},
	}
	for i, w := range want {
		if int(w.code) != i {
			t.Errorf("%s = %d, want %d: codes are wire values and must not move", w.name, w.code, i)
		}
		if got := w.code.String(); got != w.name {
			t.Errorf("Code(%d).String() = %q, want %q", w.code, got, w.name)
		}
		if !w.code.Valid() {
			t.Errorf("Code(%d).Valid() = false", w.code)
		}
	}
	for _, c := range []protocol.Code{protocol.Code(len(want)), protocol.Code(len(want) + 1), 100, math.MaxUint16} {
		if c.Valid() {
			t.Errorf("Code(%d).Valid() = true", c)
		}
		if got := c.String(); got != "unknown code" {
			t.Errorf("Code(%d).String() = %q, want %q", c, got, "unknown code")
		}
	}
	// An Error reply carries any code, known or not, unchanged, and a
	// not-the-leader reply the leader's address.
	for _, c := range []protocol.Code{protocol.CodeCanceled, protocol.CodeNotLeader, math.MaxUint16} {
		m := &protocol.Error{ID: 1, Code: c, Message: c.String()}
		if c == protocol.CodeNotLeader {
			m.Leader = "10.0.0.2:7400"
		}
		got, err := protocol.NewFrameReader(bytes.NewReader(appendFrame(t, nil, m)), 0).ReadMessage()
		if err != nil || !reflect.DeepEqual(got, m) {
			t.Errorf("Error with code %d: %#v, %v", c, got, err)
		}
	}
}

func TestConstants(t *testing.T) {
	if protocol.ALPN != "leased/1" {
		t.Errorf("ALPN = %q", protocol.ALPN)
	}
	if protocol.Version != 1 {
		t.Errorf("Version = %d", protocol.Version)
	}
	if protocol.MaxKeySize != 4096 {
		t.Errorf("MaxKeySize = %d, want 4096 (DESIGN §2)", protocol.MaxKeySize)
	}
	if protocol.DefaultMaxFrameSize < 1<<20+protocol.MaxKeySize {
		t.Errorf("DefaultMaxFrameSize = %d, below a 1 MiB value and a key of MaxKeySize bytes", protocol.DefaultMaxFrameSize)
	}
	if protocol.ErrMalformed == protocol.ErrFrameTooLarge {
		t.Error("ErrMalformed and ErrFrameTooLarge are the same error")
	}
}

func BenchmarkAppendFrameGet(b *testing.B) {
	m := &protocol.Get{ID: 123456, Key: []byte("user:123456:profile"), Revalidate: true, Known: 987654}
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		var err error
		buf, err = protocol.AppendFrame(buf[:0], m)
		if err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(len(buf)))
}

func BenchmarkDecodeGetReply(b *testing.B) {
	for _, size := range []int{0, 100, 1 << 10, 64 << 10} {
		b.Run(fmt.Sprintf("value=%d", size), func(b *testing.B) {
			m := &protocol.GetReply{ID: 123456, Found: true, Value: bytes.Repeat([]byte("v"), size), Version: 42, Term: 10 * time.Second}
			frame, err := protocol.AppendFrame(nil, m)
			if err != nil {
				b.Fatal(err)
			}
			body := frame[5:]
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := protocol.Decode(protocol.TypeGetReply, body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestStalledFrameHoldsWhatArrived: a frame that declares the largest
// length and sends only its first bytes costs the reader about what
// arrived, not what it declared; one that arrives whole, in small pieces,
// is read whole.
func TestStalledFrameHoldsWhatArrived(t *testing.T) {
	const declared = 64 << 20
	start := append(header(declared), byte(protocol.TypeGet))
	start = append(start, make([]byte, 1000)...)
	fr := protocol.NewFrameReader(bytes.NewReader(start), declared)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, _, err := fr.ReadFrame()
	runtime.ReadMemStats(&after)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("ReadFrame of a frame cut short: %v, want io.ErrUnexpectedEOF", err)
	}
	got := after.TotalAlloc - before.TotalAlloc
	t.Logf("a frame declaring %d bytes and sending 1001 allocated %d bytes", declared, got)
	if got > 256<<10 {
		t.Fatalf("a frame declaring %d bytes and sending 1001 allocated %d bytes, want at most 256 KiB", declared, got)
	}

	// A large frame in small pieces.
	body, err := protocol.AppendFrame(nil, &protocol.Write{ID: 7, Op: protocol.OpPut, Key: []byte("k"), Value: bytes.Repeat([]byte("v"), 300<<10)})
	if err != nil {
		t.Fatal(err)
	}
	fr = protocol.NewFrameReader(iotest.OneByteReader(bytes.NewReader(body)), declared)
	m, err := fr.ReadMessage()
	if w, ok := m.(*protocol.Write); err != nil || !ok || w.ID != 7 || len(w.Value) != 300<<10 {
		t.Fatalf("ReadMessage of a frame in one-byte pieces: %v, %v", m, err)
	}
}

// oldHelloReply is HelloReply as a peer from before ServerVersion knows it.
type oldHelloReply struct {
	Version      uint16        `msgpack:"v"`
	SessionID    uint64        `msgpack:"s"`
	Epsilon      time.Duration `msgpack:"e"`
	DefaultTerm  time.Duration `msgpack:"t"`
	MaxKeySize   int           `msgpack:"mk"`
	MaxValueSize int           `msgpack:"mv"`
	MaxFrameSize int           `msgpack:"mf"`
	MaxInflight  int           `msgpack:"mi"`
	RetryWindow  time.Duration `msgpack:"rw,omitempty"`
}

// TestHelloReplyServerVersionCompat checks that ServerVersion costs older
// peers nothing: an older client reads a new reply's other fields, a new
// client reads an older server's reply with an empty ServerVersion, and an
// empty ServerVersion is not sent at all.
func TestHelloReplyServerVersionCompat(t *testing.T) {
	newReply := &protocol.HelloReply{Version: protocol.Version, SessionID: 9, Epsilon: time.Second, DefaultTerm: 10 * time.Second,
		MaxKeySize: 4096, MaxValueSize: 1 << 20, MaxFrameSize: 2 << 20, MaxInflight: 100, RetryWindow: time.Minute, ServerVersion: "v1.2.0"}
	frame := appendFrame(t, nil, newReply)
	var old oldHelloReply
	if err := msgpack.Unmarshal(frame[5:], &old); err != nil {
		t.Fatalf("an older peer cannot read the new reply: %v", err)
	}
	want := oldHelloReply{newReply.Version, newReply.SessionID, newReply.Epsilon, newReply.DefaultTerm,
		newReply.MaxKeySize, newReply.MaxValueSize, newReply.MaxFrameSize, newReply.MaxInflight, newReply.RetryWindow}
	if old != want {
		t.Errorf("an older peer read %+v, want %+v", old, want)
	}

	body, err := msgpack.Marshal(&want)
	if err != nil {
		t.Fatal(err)
	}
	m, err := protocol.Decode(protocol.TypeHelloReply, body)
	if err != nil {
		t.Fatalf("Decode of an older server's reply: %v", err)
	}
	got := m.(*protocol.HelloReply)
	if got.ServerVersion != "" || got.SessionID != want.SessionID || got.RetryWindow != want.RetryWindow {
		t.Errorf("older server's reply decoded as %+v", got)
	}

	withVersion := appendFrame(t, nil, newReply)
	newReply.ServerVersion = ""
	without := appendFrame(t, nil, newReply)
	if bytes.Contains(without, []byte("\xa2sv")) || !bytes.Contains(withVersion, []byte("\xa2sv")) {
		t.Errorf("an empty ServerVersion must be omitted and a set one sent: with % x, without % x", withVersion, without)
	}
}
