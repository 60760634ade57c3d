package entrypath

import (
	"math"
	"testing"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/entryrule"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

func TestEntrySeq(t *testing.T) {
	pos := func(l, e int64) marker.Position { return marker.Position{Ledger: l, Entry: e, Batch: -1} }
	for _, tt := range []struct {
		name   string
		pos    marker.Position
		floor  uint64
		want   uint64
		packed bool
		epoch  uint64
	}{
		{"fresh producer", pos(10, 7), 0, 10<<32 | 7, true, 0},
		{"above the record", pos(10, 7), 10<<32 | 5, 10<<32 | 7, true, 0},
		{"right after the last id", pos(10, 7), 10<<32 | 7, 10<<32 | 7, true, 0},
		{"a later ledger", pos(11, 0), 10<<32 | 50_000, 11 << 32, true, 0},
		{"the largest that fits", pos(1<<31-1, 1<<32-1), 0, 1<<63 - 1, true, 0},
		{"below the record: counted", pos(10, 3), 10<<32 | 5, 10<<32 | 5, false, 0},
		{"record of an older version on ledger 0", pos(0, 12), 70_000, 70_000, false, 0},
		{"entry id too large", pos(10, 1<<32), 10<<32 | 9, 10<<32 | 9, false, 0},
		// Epochs past 0: the ledger's low 31 bits, under a name of their own.
		{"2^31 - 1, the last ledger of epoch 0", pos(1<<31-1, 5), 0, (1<<31-1)<<32 | 5, true, 0},
		{"2^31, the first ledger of epoch 1, fresh name", pos(1<<31, 0), 0, 0, true, 1},
		{"2^31, above epoch 1's record", pos(1<<31, 9), 7, 9, true, 1},
		{"2^31 + 1", pos(1<<31+1, 3), 1<<32 | 0, 1<<32 | 3, true, 1},
		{"2^31 + 1, below the record: counted", pos(1<<31+1, 3), 1<<32 | 8, 1<<32 | 8, false, 1},
		{"2^32 - 1, the last ledger of epoch 1", pos(1<<32-1, 1<<32-1), 0, 1<<63 - 1, true, 1},
		{"2^32, epoch 2", pos(1<<32, 4), 0, 4, true, 2},
		{"2^32 + 2^31, epoch 3", pos(1<<32+1<<31, 4), 0, 4, true, 3},
		{"2^40", pos(1<<40, 6), 0, 6, true, 1 << 9},
		{"2^40 + 77", pos(1<<40+77, 6), 76<<32 | 1, 77<<32 | 6, true, 1 << 9},
		{"the largest ledger id", pos(math.MaxInt64, 1), 0, (1<<31-1)<<32 | 1, true, 1<<32 - 1},
		{"epoch 1, entry id too large", pos(1<<31, 1<<32), 5, 5, false, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, packed := entrySeq(tt.pos, tt.floor)
			if got != tt.want || packed != tt.packed {
				t.Errorf("entrySeq(%v, %d) = %d, %v; want %d, %v", tt.pos, tt.floor, got, packed, tt.want, tt.packed)
			}
			if got >= 1<<63 {
				t.Errorf("entrySeq(%v, %d) = %d: outside the broker's signed range", tt.pos, tt.floor, got)
			}
			if e := seqEpoch(tt.pos.Ledger); e != tt.epoch {
				t.Errorf("seqEpoch(%d) = %d, want %d", tt.pos.Ledger, e, tt.epoch)
			}
		})
	}
}

// entrySeq and recordReach at the edges of the packing: ledger 0 (a
// fresh BookKeeper, or a test cluster, starts there), entry 0, an entry
// id just past what fits, the floor itself (the epochs of ledger ids
// from 2^31 on are TestEntrySeq's).
//
// Fails for: `pos.Ledger < 0` → `<= 0` in either, as the code was before
// epochs (a ledger 0 entry sent under a counted id, or its record
// ignored); `pos.Entry < 0` → `<= 0`; `record < 0` → `<= 0`.
func TestEntrySeqEdges(t *testing.T) {
	at := func(l, e int64) marker.Position { return marker.Position{Ledger: l, Entry: e, Batch: -1} }
	for _, tt := range []struct {
		name   string
		pos    marker.Position
		floor  uint64
		want   uint64
		packed bool
	}{
		{"ledger 0, fresh producer", at(0, 12), 0, 12, true},
		{"ledger 0, entry 0", at(0, 0), 0, 0, true},
		{"ledger 0, at the floor", at(0, 12), 12, 12, true},
		{"ledger 0, below the floor", at(0, 12), 13, 13, false},
		{"entry 2^32, fresh producer", at(10, 1<<32), 0, 0, false},
		{"entry 2^32-1, fresh producer", at(10, 1<<32-1), 0, 10<<32 | (1<<32 - 1), true},
		{"negative entry", at(10, -1), 7, 7, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, packed := entrySeq(tt.pos, tt.floor)
			if got != tt.want || packed != tt.packed {
				t.Errorf("entrySeq(%v, %d) = %d, %v; want %d, %v", tt.pos, tt.floor, got, packed, tt.want, tt.packed)
			}
		})
	}
	for _, tt := range []struct {
		name   string
		record int64
		pos    marker.Position
		want   int64
	}{
		{"ledger 0", 0<<32 | 7, at(0, 3), 5},
		{"ledger 0, the record is entry 0", 0, at(0, 0), 1},
		{"ledger 0, a later ledger's entry", 0<<32 | 7, at(1, 3), 0},
		{"negative ledger", 7, at(-1, 3), 0},
		{"ledger 2^31-1", (1<<31-1)<<32 | 9, at(1<<31-1, 0), 10},
	} {
		t.Run("recordReach "+tt.name, func(t *testing.T) {
			if got := recordReach(tt.record, tt.pos); got != tt.want {
				t.Errorf("recordReach(%d, %v) = %d, want %d", tt.record, tt.pos, got, tt.want)
			}
		})
	}
}

// Each epoch of ledger ids has a producer name of its own, epoch 0 the
// one of the versions before epochs; every one of them is a sidecar
// producer and none a marker writer, so the local side skips what they
// write (entryrule.SkipReason) as before.
func TestEpochProducerName(t *testing.T) {
	const base = "geo-sidecar.east-->west"
	for _, tt := range []struct {
		epoch uint64
		want  string
	}{
		{0, base},
		{1, base + ".epoch1"},
		{2, base + ".epoch2"},
		{1 << 9, base + ".epoch512"},
		{1<<32 - 1, base + ".epoch4294967295"},
	} {
		got := epochProducerName(base, tt.epoch)
		if got != tt.want {
			t.Errorf("epochProducerName(%q, %d) = %q, want %q", base, tt.epoch, got, tt.want)
		}
		md := wire.Metadata{ProducerName: got}
		if r := entryrule.SkipReason(&md, "west"); r != entryrule.SkipRemoteOrigin {
			t.Errorf("an entry written under %q: entryrule.SkipReason = %q, want %q", got, r, entryrule.SkipRemoteOrigin)
		}
		if _, ok := entryrule.Marker(&md, nil); ok {
			t.Errorf("an entry written under %q is taken for a marker", got)
		}
	}
}

func TestRecordReach(t *testing.T) {
	pos := func(l, e int64) marker.Position { return marker.Position{Ledger: l, Entry: e, Batch: -1} }
	at := pos(10, 199)
	for _, tt := range []struct {
		name   string
		record int64
		pos    marker.Position
		want   int64
	}{
		{"no record", -1, at, 0},
		{"the record is pos", 10<<32 | 199, at, 1},
		{"1,135 entries on", 10<<32 | 1333, at, 1135},
		{"before pos", 10<<32 | 100, at, 0},
		{"an older ledger", 9<<32 | 5_000, at, 0},
		{"a later ledger", 11<<32 | 3, at, 0},
		{"a counted record", 41, at, 0},
		{"2^31 - 1", (1<<31-1)<<32 | 20, pos(1<<31-1, 11), 10},
		// Past epoch 0 the record is the epoch's name's, packed from the
		// ledger's low 31 bits.
		{"2^31", 0<<32 | 20, pos(1<<31, 11), 10},
		{"2^31, the record before pos", 0<<32 | 10, pos(1<<31, 11), 0},
		{"2^31 + 1, a record in 2^31", 0<<32 | 900, pos(1<<31+1, 0), 0},
		{"2^31 + 1", 1<<32 | 900, pos(1<<31+1, 0), 901},
		{"2^32", 0<<32 | 4, pos(1<<32, 0), 5},
		{"2^32, a record in 2^32 + 1", 1<<32 | 4, pos(1<<32, 0), 0},
		{"2^40 + 3", 3<<32 | 1_000, pos(1<<40+3, 1), 1_000},
		{"2^40 + 3, a record in 2^40 + 4", 4<<32 | 1_000, pos(1<<40+3, 1), 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := recordReach(tt.record, tt.pos); got != tt.want {
				t.Errorf("recordReach(%d, %v) = %d, want %d", tt.record, tt.pos, got, tt.want)
			}
		})
	}
}
