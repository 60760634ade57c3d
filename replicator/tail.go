package replicator

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/geo-sidecar/geo-sidecar/marker"
)

// This file finds out which messages are already on the remote partition,
// with proof: the only ground on which a partition skips a message instead
// of sending it (see copySet).
//
// Why not trust the newest copy alone: a copy on the remote proves that
// one message is there, not that every earlier one is. A send that failed
// while a later one landed (a broker error that fails the pending queue,
// then a send made before the partition noticed) leaves a gap, and "skip
// everything up to the newest copy" acknowledged the missing message.
// Why not trust the remote's deduplication: a "duplicate" receipt says
// that the broker recorded a sequence id at or above the one sent, which
// a later message of the same producer can have set.

// copySet holds the origin positions of the copies found on the remote
// partition: each one read back from an entry there, written by this
// pair's producer. A position not in the set is sent again (at worst a
// duplicate, never a loss).
type copySet map[marker.Position]struct{}

func (s copySet) has(p marker.Position) bool {
	_, ok := s[p]
	return ok
}

// entryCopy is what the remote holds in one entry, as far as the proof
// needs it: who wrote it and the origin of each message in it.
type entryCopy struct {
	producer string
	// origins are the messages' origin clusters and positions, in batch
	// order; a message without a readable origin has ok false.
	origins []origin
}

type origin struct {
	cluster string
	pos     marker.Position
	ok      bool
	// sig is the entry pipe's signature of the origin (PropOriginSig), on
	// an entry-level origin; empty on the message path's copies.
	sig string
	// digest is the entry's digest as the signature covers it
	// (copyDigest), computed from the bytes read; nil where they are not
	// at hand (the admin API), and then the signature proves nothing.
	digest *[sha256.Size]byte
}

// entryReader reads single entries of a topic through the admin API
// (GET .../ledger/{l}/entry/{e}). pulsaradmin has the same call, but it
// drops the producer name and merges the properties of every message of a
// batch into one map, and the proof needs both.
type entryReader struct {
	base   string // admin URL without a trailing slash
	client *http.Client
}

// errNoEntry is returned for an entry the broker does not have (trimmed,
// or never written).
var errNoEntry = errors.New("no such entry")

// entry reads one entry of topic (a full topic name).
func (r *entryReader) entry(ctx context.Context, topic *utils.TopicName, ledger, entry int64) (entryCopy, error) {
	u := r.base + "/admin/v2/" + restPath(topic) + "/ledger/" + strconv.FormatInt(ledger, 10) +
		"/entry/" + strconv.FormatInt(entry, 10)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return entryCopy{}, err
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return entryCopy{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxEntryRead))
	if err != nil {
		return entryCopy{}, err
	}
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return entryCopy{}, errNoEntry
	case resp.StatusCode != http.StatusOK:
		return entryCopy{}, fmt.Errorf("read entry %d:%d: HTTP %d", ledger, entry, resp.StatusCode)
	}
	return parseEntryCopy(resp.Header, body), nil
}

// maxEntryRead bounds what one entry read takes into memory; a copy
// larger than that is not recognised (it is sent again).
const maxEntryRead = 16 << 20

func restPath(t *utils.TopicName) string {
	// The local name may hold characters that need escaping in a path.
	p := t.GetRestPath()
	i := strings.LastIndexByte(p, '/')
	return p[:i+1] + url.PathEscape(p[i+1:])
}

// parseEntryCopy reads the admin API's answer for one entry: the producer
// name from its header, the messages' origins from the batch in the body
// (the sidecar's producer always batches) or, for an entry that is not a
// batch, from the properties header. Anything it cannot read yields
// origins with ok false: unrecognised, so sent again.
func parseEntryCopy(h http.Header, body []byte) entryCopy {
	e := entryCopy{producer: h.Get("X-Pulsar-Producer-Name")}
	// A copy of the entry pipe: the whole entry's origin, signed, in the
	// entry-level properties (the producer name is the origin's). The
	// admin API hands back neither the metadata's bytes nor, for a batch,
	// the payload as stored, so the signature's digest cannot be checked
	// here: the origin is read, its signature left out, and it proves
	// nothing (bySignature). The entry pipe reads back over the binary
	// protocol instead (wireTail).
	if j := h.Get("X-Pulsar-Property"); j != "" && strings.Contains(j, PropOriginSig) {
		props := map[string]string{}
		if json.Unmarshal([]byte(j), &props) == nil && props[PropOriginSig] != "" {
			return entryCopy{producer: e.producer, origins: []origin{originOf(props)}}
		}
	}
	if n, err := strconv.Atoi(h.Get("X-Pulsar-Num-Batch-Message")); err == nil && n > 0 &&
		h.Get("X-Pulsar-Compression") == "" {
		if props, ok := batchProperties(body, n); ok {
			for _, p := range props {
				e.origins = append(e.origins, originOf(p))
			}
			return e
		}
	}
	props := map[string]string{}
	if j := h.Get("X-Pulsar-Property"); j != "" {
		if err := json.Unmarshal([]byte(j), &props); err != nil {
			return entryCopy{producer: e.producer, origins: []origin{{}}}
		}
	}
	return entryCopy{producer: e.producer, origins: []origin{originOf(props)}}
}

func originOf(props map[string]string) origin {
	p, ok := marker.ParsePosition(props[PropOriginID])
	return origin{cluster: props[PropOriginCluster], pos: p, ok: ok}
}

// batchProperties splits an uncompressed batch payload into its n
// messages and returns each one's properties. Layout per message:
// [size u32 big-endian][SingleMessageMetadata][payload]; in the metadata,
// properties are field 1 (key 1, value 2) and the payload size field 3.
func batchProperties(b []byte, n int) ([]map[string]string, bool) {
	out := make([]map[string]string, 0, min(n, 1024))
	for range n {
		if len(b) < 4 {
			return nil, false
		}
		size := binary.BigEndian.Uint32(b)
		b = b[4:]
		if uint64(size) > uint64(len(b)) {
			return nil, false
		}
		props, payloadSize, ok := singleMetadata(b[:size])
		if !ok {
			return nil, false
		}
		b = b[size:]
		if payloadSize < 0 || payloadSize > len(b) {
			return nil, false
		}
		b = b[payloadSize:]
		out = append(out, props)
	}
	return out, true
}

func singleMetadata(b []byte) (props map[string]string, payloadSize int, ok bool) {
	props = map[string]string{}
	payloadSize = -1
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, 0, false
		}
		b = b[n:]
		switch {
		case num == 1 && typ == protowire.BytesType:
			kv, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return nil, 0, false
			}
			k, v, ok := keyValue(kv)
			if !ok {
				return nil, 0, false
			}
			props[k] = v
			b = b[n:]
		case num == 3 && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 || v > 1<<31 {
				return nil, 0, false
			}
			payloadSize = int(v)
			b = b[n:]
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return nil, 0, false
			}
			b = b[n:]
		}
	}
	return props, payloadSize, payloadSize >= 0
}

func keyValue(b []byte) (k, v string, ok bool) {
	var haveK, haveV bool
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return "", "", false
		}
		b = b[n:]
		if (num == 1 || num == 2) && typ == protowire.BytesType {
			s, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return "", "", false
			}
			if num == 1 {
				k, haveK = string(s), true
			} else {
				v, haveV = string(s), true
			}
			b = b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return "", "", false
		}
		b = b[n:]
	}
	return k, v, haveK && haveV
}

// entryLister is what the tail scan needs of the remote cluster: where
// the partition ends, its ledgers, and single entries.
type entryLister interface {
	lastEntry(ctx context.Context) (ledger, entry int64, err error)
	// ledgers lists the partition's ledgers, oldest first, with how many
	// entries each holds.
	ledgers(ctx context.Context) ([]ledgerInfo, error)
	entry(ctx context.Context, ledger, entry int64) (entryCopy, error)
}

type ledgerInfo struct{ id, entries int64 }

// scanCopies walks the remote partition back from its newest entry and
// collects the origin positions of local's messages in the entries ours
// accepts as this pair's own, until it reads a copy of a message before
// from (every older copy is older still: the pair writes in origin order)
// or has read limit entries. The set it returns is proof even when err is
// not nil: it holds only what was read.
func scanCopies(ctx context.Context, r entryLister, ours func(entryCopy) bool, local string, from marker.Position, limit int) (copySet, error) {
	set := copySet{}
	ledger, entry, err := r.lastEntry(ctx)
	if err != nil || ledger < 0 {
		return set, err
	}
	var older []ledgerInfo // fetched when the walk leaves the newest ledger
	listed := false
	for reads := 0; reads < limit; reads++ {
		for entry < 0 {
			if !listed {
				ls, err := r.ledgers(ctx)
				if err != nil {
					return set, err
				}
				for _, l := range ls {
					if l.id < ledger && l.entries > 0 {
						older = append(older, l)
					}
				}
				listed = true
			}
			if len(older) == 0 {
				return set, nil
			}
			prev := older[len(older)-1]
			older = older[:len(older)-1]
			ledger, entry = prev.id, prev.entries-1
		}
		e, err := r.entry(ctx, ledger, entry)
		entry--
		if errors.Is(err, errNoEntry) {
			continue
		}
		if err != nil {
			return set, err
		}
		if !ours(e) {
			continue
		}
		reachedOlder := false
		for _, o := range e.origins {
			if !o.ok || o.cluster != local {
				continue
			}
			if from.Compare(o.pos) > 0 {
				reachedOlder = true
				continue
			}
			set[o.pos] = struct{}{}
		}
		if reachedOlder {
			return set, nil
		}
	}
	return set, nil
}

// byProducer accepts the entries written under the producer name: the
// message path's copies, whose metadata its own producer wrote.
func byProducer(name string) func(entryCopy) bool {
	return func(e entryCopy) bool { return e.producer == name }
}

// adminEntries lists one remote partition through the admin API.
type adminEntries struct {
	admin  pulsaradmin.Client
	reader *entryReader
	topic  *utils.TopicName
}

func (a adminEntries) lastEntry(ctx context.Context) (int64, int64, error) {
	id, err := a.admin.Topics().GetLastMessageIDWithContext(ctx, *a.topic)
	if err != nil {
		return -1, -1, fmt.Errorf("last message id: %w", err)
	}
	return id.LedgerID, id.EntryID, nil
}

func (a adminEntries) ledgers(ctx context.Context) ([]ledgerInfo, error) {
	st, err := a.admin.Topics().GetInternalStatsWithContext(ctx, *a.topic)
	if err != nil {
		return nil, fmt.Errorf("internal stats: %w", err)
	}
	out := make([]ledgerInfo, 0, len(st.Ledgers))
	for _, l := range st.Ledgers {
		out = append(out, ledgerInfo{id: l.LedgerID, entries: l.Entries})
	}
	return out, nil
}

func (a adminEntries) entry(ctx context.Context, ledger, entry int64) (entryCopy, error) {
	return a.reader.entry(ctx, a.topic, ledger, entry)
}
