// Package verify proves a copy: it reads a partition on the source and the
// same partition on the target, on its own (non-durable readers, none of
// the replication cursors), and says per partition whether the target
// holds every entry of the source that the entry pipe forwards, once,
// unchanged and in order, through which origin position that is proven,
// and where it is not, the first positions at fault. It is geo-sidecar
// verify's engine, and the sidecar's continuous verifier (sidecar.verify).
//
// It exists apart from the entry pipe because a proof must not share the
// thing it checks: the pipe's read-back, cursors and metrics say what the
// pipe believes it did; this package looks at what the two clusters hold.
// It shares only the pipe's rules (replicator/entryrule: which entries
// are forwarded, which are markers, what a copy's origin signature
// covers) and marker's contract of a copy's signed origin.
//
// Layers: compare.go is the comparison, pure (no goroutines, no I/O): a
// Partition fed source and target entries in position order, holding a
// bounded window of them, whatever the topic's size. entry.go turns an
// entry read (wire.Entry) into what the comparison needs (its origin, the
// signature's check, a digest of what the copy must keep). read.go is the
// I/O: readers over the sidecar's wire client, the rate limit, the walk.
// continuous.go is the continuous verifier: the same comparison kept per
// partition across rounds that read on from where the last one stopped,
// its findings as metrics.
//
// A Partition is used by one goroutine.
package verify

import (
	"crypto/sha256"
	"hash/maphash"
	"slices"

	"github.com/geo-sidecar/geo-sidecar/marker"
)

// Digest is a SHA-256 over what a copy must keep of an entry (see
// contentDigest): equal digests, equal entries as far as the copy goes.
type Digest [sha256.Size]byte

// Source is one entry of the source partition as the comparison sees it.
type Source struct {
	Pos         marker.Position
	PublishTime int64 // Unix milliseconds, from the entry's metadata
	// Messages in the entry (a batch's size; 1 when not batched), so that
	// what is not proven is also counted in messages (Unproven).
	Messages int32
	// Skip is "" when the entry pipe forwards the entry to the target,
	// else why it does not (entryrule.SkipReason's reasons, or "malformed").
	Skip string
	// Sealed: an encrypted batch (Left.Sealed).
	Sealed bool
	Digest Digest
	// kept, instead of Digest, is the entry's content held (sourceOf
	// with hold), owned by the comparison once fed: see Config.KeptBytes.
	kept []byte
}

// Claim is what a target entry says of where it comes from.
type Claim uint8

// Claims.
const (
	// Local: no origin properties, the target's own data.
	Local Claim = iota
	// OtherOrigin: a copy from a cluster other than the source.
	OtherOrigin
	// MarkerCopy: a geo-sidecar marker, the subscription sync's business.
	MarkerCopy
	// Unreadable: the metadata does not parse.
	Unreadable
	// FromSource: a copy of a source entry (its origin cluster is the
	// source); Origin says which, Signed whether that is proven.
	FromSource
)

// Target is one entry of the target partition as the comparison sees it.
type Target struct {
	Pos   marker.Position
	Claim Claim
	// Origin is the source position the copy names (FromSource);
	// OriginOK is false when its origin id does not parse.
	Origin   marker.Position
	OriginOK bool
	// Signed: the origin carries a valid version 2 signature for this
	// partition, source and target over the bytes read.
	Signed bool
	Digest Digest
	// held, instead of Digest, are the entry's bytes while it is fed
	// (targetOf with hold); fp is their fingerprint once let go (hasFP).
	held  *heldTarget
	fp    uint64
	hasFP bool
}

// Config bounds and frames one partition's comparison.
type Config struct {
	// Window is how many source entries the comparison remembers (about
	// 80 bytes each). An expected entry that leaves it without a copy is
	// missing; a copy arriving later than that is judged without its
	// source entry (see Partition.judge). At least 1.
	Window int
	// Deferred is how many target claims that prove nothing (no valid
	// signature) wait for the source to reach their origin; beyond it the
	// oldest is judged target-only. At least 1.
	Deferred int
	// Authenticated: a marker key is configured, so only a validly
	// signed origin is proof. Without one, every origin is taken at its
	// word and only the digests are compared.
	Authenticated bool
	// FromEarliest: the source is read from its first entry, so a copy of
	// an earlier position is of one the source no longer holds
	// (retention). Otherwise (--since) such copies lie before the range
	// and are left out.
	FromEarliest bool
	// MaxFindings is how many findings of each kind are kept, first
	// ones first; the counts are whole.
	MaxFindings int
	// KeptBytes is how much of the source entries' content (Source.kept)
	// the comparison holds: a copy judged while its source entry's
	// content is held is compared with it byte for byte, neither side
	// hashed. Content beyond it is hashed, the oldest first, or, when its
	// copy was found already, only fingerprinted (a keyed 64-bit hash, for
	// telling a later copy's bytes apart). Release does the same with
	// all of it. 0: content given is hashed at once.
	KeptBytes int
	// Continuous: the comparison of a verifier that follows the two
	// partitions (Continuous) rather than a walk to their ends. A fault
	// does not stop Through: it passes every entry proven copied or
	// counted at fault, so that one loss does not leave the copy
	// unverified for good (the counts say what was found). Its walker
	// reads the source beyond the copies only while Room says so, so an
	// expected entry that leaves the window without a copy is one a later
	// copy passed: missing. And Round, at the end of each of its rounds,
	// counts an entry missing that a later copy passed at two rounds'
	// ends in a row (one round of grace for a copy that lands a little
	// out of place, which is then out of order).
	Continuous bool
	// NotHeld, when set, is told of every expected entry that ends
	// without a copy of its bytes on the target (what Result.NotHeld
	// counts), in source order, once, at Finish: the failback's stranded
	// tail (geo-sidecar failback). Set, the count is exact whatever the
	// window: an expected entry that leaves the window without a copy is
	// remembered (its position, publish time and size, about 40 bytes)
	// until Finish, and a copy of it found later, however far out of
	// place, holds it when its origin is proven (a valid signature, or no
	// key configured): the bytes are no longer there to compare, the
	// signature covers the copy's. Without it a copy later than the
	// window reaches holds nothing (see Result.NotHeld). Not for
	// Continuous comparisons.
	NotHeld func(Left)
}

// Left is an expected source entry the target holds no copy of with its
// bytes (Config.NotHeld).
type Left struct {
	Pos         marker.Position
	PublishTime int64 // Unix milliseconds
	Messages    int32
	// Sealed: the entry is an encrypted batch, whose messages' own
	// metadata a late copy cannot flag (entryrule.ErrSealed).
	Sealed bool
}

// Kind is what a finding is.
type Kind string

// Findings. The first five are faults (exit status 1); the others are
// facts of the topics.
const (
	Missing    Kind = "missing"      // an expected entry with no copy, while later ones have theirs
	Duplicated Kind = "duplicated"   // a second copy of an entry, same bytes
	Divergent  Kind = "divergent"    // a copy naming an entry, with other bytes
	OutOfOrder Kind = "out-of-order" // a copy that landed after a copy of a later entry
	// PresentUnproven: the first copy of an expected entry holds exactly
	// its bytes, but its origin signature verifies under none of the keys
	// tried: signed under another marker key (one not configured, such as
	// the key before a rotation), or forged by someone who can write to
	// the target. The target holds the entry (it is not missing, and not
	// in the drill's RPO), but nothing proves the pipe put it there, so
	// it is not present either: a fault, and verified-through stops
	// before it.
	PresentUnproven Kind = "present-unproven"
	SourceGone      Kind = "source-gone" // a proven copy of an entry the source no longer holds
	TargetOnly      Kind = "target-only" // claims the source, but the source never had it, or a second copy nothing proves
)

// Finding is one entry found at fault, or of note.
type Finding struct {
	Kind   Kind
	Origin marker.Position
	// Target is the copy's position on the target; nil for Missing.
	Target *marker.Position
	Detail string
}

// Through is how far a target is proven complete: every entry of the
// source through Origin that the pipe forwards has its copy there.
//
// It is also where a later walk can resume (a verifier that runs
// continuously): the source after Origin, the target after Target, in a
// range that starts mid-topic (Config.FromEarliest false). A copy placed
// on the target before Target but naming an entry after Origin (out of
// order) is then not seen again; it was reported when it was.
type Through struct {
	Origin      marker.Position
	PublishTime int64 // Unix milliseconds, the entry's at Origin
	// Target is where the last copy at or before Origin sits on the
	// target (the first copy found of each entry); HasTarget is false
	// when the entries through Origin are all ones the pipe does not
	// forward.
	Target    marker.Position
	HasTarget bool
}

// Result is one partition's verdict.
type Result struct {
	SourceEntries, TargetEntries int64 // read
	Expected                     int64 // source entries the pipe forwards
	Skipped                      int64 // source entries it does not (markers, replicate_to, copies from elsewhere)
	Present                      int64 // expected entries with a proven copy
	// NotYetCopied are expected entries after the last copy: a copy
	// still under way, not a loss.
	NotYetCopied                                                       int64
	Missing, Duplicated, Divergent, OutOfOrder, SourceGone, TargetOnly int64
	// PresentUnproven are expected entries whose copy holds their bytes
	// under an origin no key tried proves (see the Kind).
	PresentUnproven int64
	// Target entries that do not claim the source.
	Local, OtherOrigin, Markers, Unreadable int64
	// BeforeRange: copies of entries before the range (--since).
	BeforeRange int64
	Through     *Through // nil: not even the first expected entry is proven
	// Unproven is what of the source read lies past Through.
	Unproven Unproven
	// NotHeld is what of the source read the target holds no copy of
	// with its bytes, proven or not: the expected entries not yet
	// copied, missing, or whose every copy differs. Unlike Unproven it
	// leaves out what a failover would still deliver (copies after a
	// gap, copies present but unproven): the drill's RPO. A copy judged
	// by its signature alone (one landing later than the window reaches)
	// does not make its entry held, unless Config.NotHeld is set (the
	// failback's stranded tail, exact: see there).
	NotHeld  Unproven
	Findings []Finding
}

// Unproven is what a walk read of the source and did not prove copied:
// the expected entries after Through (not yet copied, missing, or whose
// copy is not the same, and any copied out of order past the first of
// those), the messages in them, and the publish times (Unix milliseconds)
// of the first and the last of them. All zero when every expected entry
// read is proven. Read up to the ends the source and the target had at a
// moment (Options.Ends), it is what a failover at that moment would leave
// behind: the failover drill's RPO.
type Unproven struct {
	Entries, Messages                 int64
	FirstPublishTime, LastPublishTime int64
}

// Faults is the number of faults found: missing, duplicated, divergent,
// out-of-order entries, and copies present but unproven.
func (r *Result) Faults() int64 {
	return r.Missing + r.Duplicated + r.Divergent + r.OutOfOrder + r.PresentUnproven
}

// CopyFaults is Faults but for the copies present but unproven: the
// entries a broken copy lost, doubled, changed or reordered.
func (r *Result) CopyFaults() int64 { return r.Missing + r.Duplicated + r.Divergent + r.OutOfOrder }

// record is a source entry in the window.
type record struct {
	pos     marker.Position
	copyAt  marker.Position // where its first copy is on the target (matched)
	publish int64
	digest  Digest
	kept    []byte // the content, held instead of digest (Config.KeptBytes)
	// compared: the content was let go unhashed after the first copy
	// matched it (Config.KeptBytes); fp is its fingerprint.
	compared bool
	fp       uint64
	state    uint8
	sealed   bool // Source.Sealed
	msgs     int32
	// passed: at the end of a round (Continuous), a later entry had its
	// copy and this one none.
	passed bool
}

const (
	unmatched uint8 = iota // expected, no copy yet
	matched                // expected, its copy found
	skipped                // not expected
	missed                 // expected, counted missing (Continuous: Round)
	unproven               // expected, a copy with its bytes found, its origin not proven (PresentUnproven)
)

// held reports whether the target holds a copy of the record's entry
// with its bytes, proven or not.
func (r *record) held() bool { return r.state == matched || r.state == unproven }

// Partition compares one partition. Feed it with Source in source
// position order and Target in target position order, interleaved as
// Wants says; then SourceDone and Finish.
type Partition struct {
	cfg Config
	res Result

	// ring holds the last cfg.Window source entries read, in position
	// order: entry number base+i at ring[(head+i)%len(ring)].
	ring       []record
	head, size int
	base       int64 // number of the oldest entry in ring
	// front is the number of the first entry not yet settled: the first
	// expected entry without a copy (everything before it is proven).
	front int64
	// broken: an expected entry left the window without a copy, so
	// nothing after it is proven complete.
	broken bool

	first, last marker.Position // first and last source entry read
	started     bool
	sourceDone  bool

	maxMatched marker.Position // the highest origin with a proven copy
	anyMatched bool

	deferred []Target // unproven claims beyond the source read, oldest first
	kinds    map[Kind]int

	// evicted counts the expected entries that left the window without a
	// copy while no later entry had one (NotYetCopied so far), and
	// evictedAt names the first MaxFindings of them: once a later entry's
	// copy is found, they are missing (passed).
	evicted   int64
	evictedAt []marker.Position
	// gone is NotHeld of the expected entries that left the window
	// without a copy with their bytes (none can come: see NotHeld).
	gone Unproven
	// exact (Config.NotHeld set): the expected entries that left the
	// window without a copy wait in away, in source order, for a proven
	// copy later than the window reaches (Config.NotHeld); gone is
	// counted at Finish.
	exact bool
	away  []awayRecord

	// keptTotal is the bytes of content the window's records hold;
	// keptFrom the number of the oldest entry that may hold some.
	keptTotal int
	keptFrom  int64
}

// New starts the comparison of one partition. The window grows as
// entries come, up to cfg.Window: a verifier that follows many partitions
// holds what each one needs, not the most any could.
func New(cfg Config) *Partition {
	cfg.Window = max(cfg.Window, 1)
	cfg.Deferred = max(cfg.Deferred, 1)
	return &Partition{cfg: cfg, ring: make([]record, min(cfg.Window, initialRing)), kinds: map[Kind]int{},
		exact: cfg.NotHeld != nil && !cfg.Continuous}
}

// awayRecord is an expected entry that left the window without a copy
// with its bytes (Partition.exact): held turns true when a proven copy
// of it is found later.
type awayRecord struct {
	pos     marker.Position
	publish int64
	msgs    int32
	sealed  bool
	held    bool
}

// heldAway reports whether o is an entry that left the window without a
// copy, and marks it held (Partition.exact).
func (p *Partition) heldAway(o marker.Position) bool {
	i, ok := slices.BinarySearchFunc(p.away, o, func(a awayRecord, o marker.Position) int { return a.pos.Compare(o) })
	if !ok || p.away[i].held {
		return false
	}
	p.away[i].held = true
	return true
}

// initialRing is the window's first size, in entries.
const initialRing = 64

// grow doubles the ring (up to cfg.Window), keeping its entries in order.
func (p *Partition) grow() {
	n := min(2*len(p.ring), p.cfg.Window)
	ring := make([]record, n)
	for i := range p.size {
		ring[i] = p.ring[(p.head+i)%len(p.ring)]
	}
	p.ring, p.head = ring, 0
}

// proof reports whether t's origin counts as proof of where it came from.
func (p *Partition) proof(t Target) bool { return t.Signed || !p.cfg.Authenticated }

// Wants reports whether more source entries must be read before t can be
// judged: t is a proven copy of an entry beyond those read. An unproven
// claim never makes the source be read further (a forged origin must not
// make the walk read the whole source and judge everything in between
// missing): it waits until the source gets there.
func (p *Partition) Wants(t Target) bool {
	if p.sourceDone || t.Claim != FromSource || !t.OriginOK || !p.proof(t) {
		return false
	}
	return !p.started || t.Origin.Compare(p.last) > 0
}

// AddSource feeds the next source entry; positions must increase.
func (p *Partition) AddSource(s Source) {
	if p.started && s.Pos.Compare(p.last) <= 0 {
		return // delivered again: already seen
	}
	p.res.SourceEntries++
	if p.size == len(p.ring) && len(p.ring) < p.cfg.Window {
		p.grow()
	}
	if p.size == len(p.ring) {
		p.evict()
	}
	st := unmatched
	msgs := max(s.Messages, 1)
	if s.Skip != "" {
		st = skipped
		p.res.Skipped++
	} else {
		p.res.Expected++
		u := &p.res.Unproven
		if u.Entries == 0 {
			u.FirstPublishTime = s.PublishTime
		}
		u.Entries++
		u.Messages += int64(msgs)
		u.LastPublishTime = s.PublishTime
	}
	rec := record{pos: s.Pos, publish: s.PublishTime, digest: s.Digest, state: st, msgs: msgs, sealed: s.Sealed}
	if s.kept != nil {
		if st == skipped || p.cfg.KeptBytes <= 0 {
			rec.digest = Digest(sha256.Sum256(s.kept))
			putKept(s.kept)
		} else {
			rec.kept = s.kept
			p.keptTotal += len(s.kept)
		}
	}
	p.ring[(p.head+p.size)%len(p.ring)] = rec
	p.size++
	p.trimKept()
	if !p.started {
		p.first, p.started = s.Pos, true
	}
	p.last = s.Pos
	p.settle()
	p.judgeDeferred(false)
}

// evict drops the oldest source entry from the window. An expected one
// without a copy is missing when a later entry has its copy already, and
// not yet copied otherwise.
func (p *Partition) evict() {
	r := p.ring[p.head]
	switch r.state {
	case unmatched:
		p.unsettled(r)
	case unproven:
		// Not proven: nothing after it is proven complete (a continuous
		// comparison counted it and goes on: see settle).
		p.broken = p.broken || !p.cfg.Continuous
	}
	if r.state != skipped && !r.held() {
		if p.exact {
			p.away = append(p.away, awayRecord{pos: r.pos, publish: r.publish, msgs: r.msgs, sealed: r.sealed})
		} else {
			addUnproven(&p.gone, r)
			p.left(r)
		}
	}
	if r.kept != nil {
		p.keptTotal -= len(r.kept)
		putKept(r.kept)
		p.ring[p.head].kept = nil
	}
	p.head = (p.head + 1) % len(p.ring)
	p.size--
	p.base++
	if p.front < p.base {
		p.front = p.base
	}
}

// unsettled counts an expected entry that ends without a copy. A
// continuous comparison only evicts such an entry when a later copy made
// its walker read past the window (see Config.Continuous): missing, and
// Through goes on.
func (p *Partition) unsettled(r record) {
	switch {
	case p.cfg.Continuous:
		p.missing(r.pos)
		return
	case p.anyMatched && r.pos.Compare(p.maxMatched) < 0:
		p.missing(r.pos)
	default:
		p.res.NotYetCopied++
		p.evicted++
		if len(p.evictedAt) < max(p.cfg.MaxFindings, 1) {
			p.evictedAt = append(p.evictedAt, r.pos)
		}
	}
	p.broken = true
}

// passed counts missing the entries evicted as not yet copied (see
// evicted): a copy of a later entry was just found. Every evicted entry
// is older than every entry in the window, so the copy is of a later one
// whatever it is; and a missing entry followed by more than Window
// entries the pipe does not forward (copies from a third cluster,
// markers) before the next copy would otherwise end the walk "not yet
// copied": exit status 0 with an entry lost.
func (p *Partition) passed() {
	if p.evicted == 0 {
		return
	}
	p.res.NotYetCopied -= p.evicted
	p.res.Missing += p.evicted
	for _, pos := range p.evictedAt {
		p.find(Finding{Kind: Missing, Origin: pos})
	}
	p.evicted, p.evictedAt = 0, p.evictedAt[:0]
}

func (p *Partition) missing(pos marker.Position) {
	p.res.Missing++
	p.find(Finding{Kind: Missing, Origin: pos})
}

// settle moves front past the entries that are proven (copied or not
// expected), and Through with it; what it passes is no longer Unproven.
// A copy present but unproven stops it as a missing one does, but in a
// continuous comparison, which passes what it counted at fault.
func (p *Partition) settle() {
	u := &p.res.Unproven
	for !p.broken && p.front < p.base+int64(p.size) {
		r := &p.ring[(p.head+int(p.front-p.base))%len(p.ring)]
		if r.state == unmatched || (r.state == unproven && !p.cfg.Continuous) {
			u.FirstPublishTime = r.publish // the first expected entry past Through
			return
		}
		if r.state == matched {
			u.Entries--
			u.Messages -= int64(r.msgs)
			if u.Entries == 0 {
				*u = Unproven{}
			}
		}
		th := Through{Origin: r.pos, PublishTime: r.publish}
		if prev := p.res.Through; prev != nil {
			th.Target, th.HasTarget = prev.Target, prev.HasTarget
		}
		if r.state == matched && (!th.HasTarget || r.copyAt.Compare(th.Target) > 0) {
			th.Target, th.HasTarget = r.copyAt, true
		}
		p.res.Through = &th
		p.front++
	}
}

// at returns the window's entry at pos, and whether pos is within the
// window's span at all (between its oldest and newest entry).
func (p *Partition) at(pos marker.Position) (r *record, inSpan bool) {
	if p.size == 0 {
		return nil, false
	}
	lo, hi := 0, p.size // binary search over positions, which increase
	for lo < hi {
		mid := (lo + hi) / 2
		if p.ring[(p.head+mid)%len(p.ring)].pos.Compare(pos) < 0 {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	oldest := p.ring[p.head].pos
	inSpan = pos.Compare(oldest) >= 0
	if lo < p.size {
		if r := &p.ring[(p.head+lo)%len(p.ring)]; r.pos == pos {
			return r, true
		}
	}
	return nil, inSpan
}

// AddTarget feeds the next target entry.
func (p *Partition) AddTarget(t Target) {
	p.res.TargetEntries++
	switch t.Claim {
	case Local:
		p.res.Local++
		return
	case OtherOrigin:
		p.res.OtherOrigin++
		return
	case MarkerCopy:
		p.res.Markers++
		return
	case Unreadable:
		p.res.Unreadable++
		return
	}
	if !t.OriginOK {
		p.targetOnly(t, "origin id does not parse")
		return
	}
	if !p.sourceDone && (!p.started || t.Origin.Compare(p.last) > 0) {
		// Beyond what was read: an unproven claim waits (see Wants).
		if len(p.deferred) == p.cfg.Deferred {
			old := p.deferred[0]
			p.deferred = p.deferred[1:]
			p.targetOnly(old, "origin not proven, and beyond the source read while too many such claims waited")
		}
		t.digest() // kept beyond this call: its bytes are not
		p.deferred = append(p.deferred, t)
		return
	}
	p.judge(t)
}

// judgeDeferred judges the waiting claims the source has reached (all of
// them when all is set).
func (p *Partition) judgeDeferred(all bool) {
	n := 0
	for _, t := range p.deferred {
		if all || t.Origin.Compare(p.last) <= 0 {
			p.judge(t)
			continue
		}
		p.deferred[n] = t
		n++
	}
	clear(p.deferred[n:])
	p.deferred = p.deferred[:n]
}

// judge judges a copy of the source's entry at t.Origin against the
// window.
func (p *Partition) judge(t Target) {
	o, proof := t.Origin, p.proof(t)
	if !p.started || o.Compare(p.first) < 0 {
		switch {
		case !p.cfg.FromEarliest:
			p.res.BeforeRange++
		case proof:
			p.res.SourceGone++
			p.find(Finding{Kind: SourceGone, Origin: o, Target: &t.Pos})
		default:
			p.targetOnly(t, "origin signature not valid, and the source no longer holds the entry")
		}
		return
	}
	if o.Compare(p.last) > 0 {
		p.targetOnly(t, "the source holds no entry at the origin position")
		return
	}
	r, inSpan := p.at(o)
	if r == nil {
		if !inSpan && proof && p.exact && p.heldAway(o) {
			// Its entry left the window without a copy: this one is far
			// out of place, but it is there (Config.NotHeld).
			p.res.OutOfOrder++
			p.find(Finding{Kind: OutOfOrder, Origin: o, Target: &t.Pos, Detail: "a copy later than the comparison window reaches: bytes not compared (the signature covers them)"})
			return
		}
		switch {
		case inSpan:
			p.targetOnly(t, "the source holds no entry at the origin position")
		case !proof:
			p.targetOnly(t, "origin signature not valid (entry older than the comparison window)")
		case p.res.Through != nil && o.Compare(p.res.Through.Origin) <= 0:
			// Everything through Through had its copy: a second one.
			p.res.Duplicated++
			p.find(Finding{Kind: Duplicated, Origin: o, Target: &t.Pos, Detail: "older than the comparison window: bytes not compared (the signature covers them)"})
		default:
			p.res.OutOfOrder++
			p.find(Finding{Kind: OutOfOrder, Origin: o, Target: &t.Pos, Detail: "a copy later than the comparison window reaches (may be a duplicate)"})
		}
		return
	}
	switch {
	case r.state == skipped:
		p.targetOnly(t, "a copy of an entry the entry pipe does not forward to this target")
	case !p.same(r, &t):
		p.res.Divergent++
		d := "other bytes than the source's entry"
		if !proof {
			d += "; origin signature not valid"
		}
		p.find(Finding{Kind: Divergent, Origin: o, Target: &t.Pos, Detail: d})
	case !proof && r.state == unmatched:
		// The target holds the entry, but nothing proves the pipe put it
		// there: its own finding, not missing (a copy under an old key
		// after a key change) and not present (a forgery).
		r.state, r.copyAt = unproven, t.Pos
		p.res.PresentUnproven++
		p.find(Finding{Kind: PresentUnproven, Origin: o, Target: &t.Pos,
			Detail: "same bytes as the source's entry, but its origin signature verifies under none of the keys tried: signed under another marker key, or forged"})
	case !proof && r.state == missed:
		p.targetOnly(t, "same bytes as the source's entry, but the origin signature is not valid; after the entry was counted missing")
	case !proof:
		p.targetOnly(t, "same bytes as the source's entry, but the origin signature is not valid, and the entry has a copy already")
	case r.state == missed:
		// Counted missing at a round's end; here it is, late.
		r.state, r.copyAt = matched, t.Pos
		p.res.Present++
		p.res.OutOfOrder++
		p.find(Finding{Kind: OutOfOrder, Origin: o, Target: &t.Pos, Detail: "after it was counted missing"})
	case r.state == matched:
		p.res.Duplicated++
		p.find(Finding{Kind: Duplicated, Origin: o, Target: &t.Pos})
	default: // unmatched, or present but unproven: its first proven copy
		r.state, r.copyAt = matched, t.Pos
		p.res.Present++
		if p.anyMatched && o.Compare(p.maxMatched) < 0 {
			p.res.OutOfOrder++
			p.find(Finding{Kind: OutOfOrder, Origin: o, Target: &t.Pos, Detail: "after the copy of " + p.maxMatched.String()})
		} else {
			p.maxMatched, p.anyMatched = o, true
		}
		p.passed()
		p.settle()
	}
}

// same reports whether t's content is r's: byte for byte while r holds
// its content and t its bytes, by fingerprint once r's content was let go
// after its first copy matched it (see Config.KeptBytes), else by digest
// (hashing what holds bytes).
func (p *Partition) same(r *record, t *Target) bool {
	switch {
	case r.compared && t.held != nil:
		return fingerprint(t.held.md, t.held.cut[:], t.held.payload) == r.fp
	case r.compared:
		return t.hasFP && t.fp == r.fp
	case r.kept != nil && t.held != nil:
		return keptEqual(r.kept, t.held.md, t.held.cut[:], t.held.payload)
	case r.kept != nil:
		p.hashKept(r)
	}
	t.digest()
	return t.Digest == r.digest
}

// hashKept hashes a record's held content and lets go of it.
func (p *Partition) hashKept(r *record) {
	r.digest = Digest(sha256.Sum256(r.kept))
	p.dropKept(r)
}

func (p *Partition) dropKept(r *record) {
	p.keptTotal -= len(r.kept)
	putKept(r.kept)
	r.kept = nil
}

// trimKept lets go of held content beyond Config.KeptBytes, the oldest
// first: hashed when its copy is still to be judged, else let go.
func (p *Partition) trimKept() {
	p.keptFrom = max(p.keptFrom, p.base)
	for p.keptTotal > p.cfg.KeptBytes && p.keptFrom < p.base+int64(p.size) {
		p.letGo(&p.ring[(p.head+int(p.keptFrom-p.base))%len(p.ring)])
		p.keptFrom++
	}
}

func (p *Partition) letGo(r *record) {
	switch {
	case r.kept == nil:
	case r.state == matched:
		r.fp = maphash.Bytes(fpSeed, r.kept)
		p.dropKept(r)
		r.compared = true
	default:
		p.hashKept(r)
	}
}

// Release lets go of every source entry's content the comparison holds
// (Config.KeptBytes), hashing what may still be judged: a continuous
// verifier calls it at the end of each partition's walk, so that what it
// holds is one partition's at a time.
func (p *Partition) Release() {
	for i := range p.size {
		p.letGo(&p.ring[(p.head+i)%len(p.ring)])
	}
	p.keptFrom = p.base + int64(p.size)
}

func (p *Partition) targetOnly(t Target, detail string) {
	p.res.TargetOnly++
	p.find(Finding{Kind: TargetOnly, Origin: t.Origin, Target: &t.Pos, Detail: detail})
}

func (p *Partition) find(f Finding) {
	if p.kinds[f.Kind] >= max(p.cfg.MaxFindings, 1) {
		return
	}
	p.kinds[f.Kind]++
	if f.Target != nil {
		at := *f.Target
		f.Target = &at
	}
	p.res.Findings = append(p.res.Findings, f)
}

// addUnproven counts r's entry in u, after the entries counted there.
func addUnproven(u *Unproven, r record) {
	if u.Entries == 0 {
		u.FirstPublishTime = r.publish
	}
	u.Entries++
	u.Messages += int64(r.msgs)
	u.LastPublishTime = r.publish
}

// left tells Config.NotHeld of r.
func (p *Partition) left(r record) {
	if p.cfg.NotHeld != nil {
		p.cfg.NotHeld(Left{Pos: r.pos, PublishTime: r.publish, Messages: r.msgs, Sealed: r.sealed})
	}
}

// notHeld is Result.NotHeld now: the entries evicted without a copy with
// their bytes, then those in the window.
func (p *Partition) notHeld() Unproven {
	u := p.gone
	for _, a := range p.away {
		if !a.held {
			addUnproven(&u, record{pos: a.pos, publish: a.publish, msgs: a.msgs})
		}
	}
	for i := range p.size {
		if r := p.ring[(p.head+i)%len(p.ring)]; r.state != skipped && !r.held() {
			addUnproven(&u, r)
		}
	}
	return u
}

// Snapshot is the verdict so far, without judging what is still in the
// window: the counts of what was judged, and Through (a verifier that
// runs continuously reports these as it goes).
func (p *Partition) Snapshot() Result {
	r := p.res
	r.NotHeld = p.notHeld()
	r.Findings = append([]Finding(nil), p.res.Findings...)
	if p.res.Through != nil {
		th := *p.res.Through
		r.Through = &th
	}
	return r
}

// Room reports whether a continuous walker may read the source beyond
// what the target's copies name: while the entries not yet settled fill
// less than half the window, so that what leaves it is settled.
func (p *Partition) Room() bool {
	return p.base+int64(p.size)-p.front < int64(p.cfg.Window)/2
}

// Pending returns the publish time (Unix milliseconds) of the first
// expected entry read and not yet proven copied; ok is false when every
// entry read is settled.
func (p *Partition) Pending() (publish int64, ok bool) {
	if p.broken || p.front >= p.base+int64(p.size) {
		return 0, false
	}
	return p.ring[(p.head+int(p.front-p.base))%len(p.ring)].publish, true
}

// Round ends a round of a continuous walk (Config.Continuous): an
// expected entry without a copy that a later entry's copy had passed at
// the previous round's end too is counted missing. caughtUp says the
// source was read to the end it had after the target's end was taken:
// the claims still waiting for the source then name entries it never had
// (target-only), as at SourceDone.
func (p *Partition) Round(caughtUp bool) {
	for i := int(p.front - p.base); i < p.size; i++ { // everything before front is settled
		r := &p.ring[(p.head+i)%len(p.ring)]
		if r.state != unmatched || !p.anyMatched || r.pos.Compare(p.maxMatched) >= 0 {
			continue
		}
		if r.passed {
			r.state = missed
			p.missing(r.pos)
		} else {
			r.passed = true
		}
	}
	p.settle()
	if caughtUp {
		p.judgeDeferred(true)
	}
}

// AddTargetPastEnd judges t, a proven copy of an entry after the end the
// source had when the round began (so after every entry the source will
// hold at that position): the source never had it.
func (p *Partition) AddTargetPastEnd(t Target) {
	p.res.TargetEntries++
	p.targetOnly(t, "the source holds no entry at the origin position")
}

// SourceDone says the source was read to its end (as it was when the walk
// began): claims beyond it are judged now.
func (p *Partition) SourceDone() {
	p.sourceDone = true
	p.judgeDeferred(true)
}

// Finish ends the comparison once both sides were read to their ends and
// returns the verdict. Expected entries still without a copy are missing
// when a later entry has its copy, and not yet copied otherwise.
func (p *Partition) Finish() Result {
	p.SourceDone()
	for i := range p.size {
		if r := p.ring[(p.head+i)%len(p.ring)]; r.state == unmatched {
			p.unsettled(r)
		}
	}
	p.res.NotHeld = p.notHeld()
	for _, a := range p.away {
		if !a.held {
			p.left(record{pos: a.pos, publish: a.publish, msgs: a.msgs, sealed: a.sealed})
		}
	}
	p.away = nil
	for i := range p.size {
		if r := p.ring[(p.head+i)%len(p.ring)]; r.state != skipped && !r.held() {
			p.left(r)
		}
	}
	p.size = 0
	return p.res
}
