package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
)

// Frame magic numbers: a payload command carries its checksum after
// magicCRC32C; broker entry metadata (only sent to clients that advertise
// supports_broker_entry_metadata, which this package does not) is introduced
// by magicBrokerEntryMetadata.
const (
	magicCRC32C              = 0x0e01
	magicBrokerEntryMetadata = 0x0e02
)

// DefaultMaxMessageSize is the broker's default maxMessageSize, used until
// CONNECTED says otherwise.
const DefaultMaxMessageSize = 5 * 1024 * 1024

// framePadding is the room a frame may take beyond the message size limit for
// its command and metadata; Pulsar allows the same 10 KiB.
const framePadding = 10 * 1024

// ErrMalformed is wrapped by every error about bytes received that do not
// follow the protocol: bad sizes, bad checksums, truncated or invalid
// protobuf. A connection that sees one is closed; it is never retryable on
// the same connection.
var ErrMalformed = errors.New("wire: malformed")

// ErrChecksum is wrapped (together with ErrMalformed) when a payload frame's
// CRC-32C does not match its bytes.
var ErrChecksum = errors.New("wire: checksum mismatch")

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Frame is one decoded frame. Command is the encoded BaseCommand; Metadata
// and Payload are set only for payload commands (SEND, MESSAGE) and alias the
// buffer the frame was read into.
type Frame struct {
	Command []byte
	// HasPayload reports a payload section (possibly with empty metadata
	// and payload).
	HasPayload bool
	// Checksummed reports that the payload section carried a CRC-32C, which
	// was verified.
	Checksummed bool
	// PayloadCRC is the CRC-32C of Payload alone, when Checksummed and the
	// payload is large enough to be worth it (splitCRCAbove): learnt
	// checking the checksum, for a producer forwarding the payload
	// (Outgoing.PayloadCRC).
	PayloadCRC PayloadCRC
	Metadata   []byte
	Payload    []byte
	// BrokerEntryMetadata is the raw broker entry metadata when the broker
	// sent one; it is skipped, never interpreted.
	BrokerEntryMetadata []byte
}

// ReadFrame reads one frame from r into buf (grown as needed; pass the
// previous return to reuse it) and parses it. maxFrame bounds the frame's
// total size; a larger announced size is ErrMalformed, not an allocation.
// The returned Frame aliases the returned buffer.
func ReadFrame(r io.Reader, buf []byte, maxFrame int) (Frame, []byte, error) {
	f, buf, _, err := readFrame(r, buf, maxFrame, math.MaxInt)
	return f, buf, err
}

// readFrame is ReadFrame, except that a frame larger than ownAbove is read
// into a buffer of its own from framePool (fb, with buf returned
// unchanged), so that a large entry is handed on without copying it again.
// The Frame then aliases fb.b; whoever ends up with fb recycles it
// (framePool.put) or lets it go.
func readFrame(r io.Reader, buf []byte, maxFrame, ownAbove int) (f Frame, _ []byte, fb *frameBuf, err error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return Frame{}, buf, nil, err
	}
	size := binary.BigEndian.Uint32(hdr[:])
	if size < 4 {
		return Frame{}, buf, nil, malformed("frame size %d is smaller than its command size field", size)
	}
	if uint64(size) > uint64(maxFrame) {
		return Frame{}, buf, nil, malformed("frame size %d exceeds the limit %d", size, maxFrame)
	}
	b := buf
	if int(size) > ownAbove {
		fb = frames.get(int(size))
		b = fb.b
	} else if cap(b) < int(size) {
		b = make([]byte, size)
		buf = b
	}
	b = b[:size]
	if _, err := io.ReadFull(r, b); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return Frame{}, buf, nil, fmt.Errorf("read frame of %d bytes: %w", size, err)
	}
	f, err = ParseFrame(b)
	if fb == nil {
		buf = b
	}
	return f, buf, fb, err
}

// ParseFrame parses a frame without its leading total-size field. The
// result aliases b.
func ParseFrame(b []byte) (Frame, error) {
	var f Frame
	if len(b) < 4 {
		return f, malformed("frame of %d bytes has no command size", len(b))
	}
	cmdSize := binary.BigEndian.Uint32(b)
	rest := b[4:]
	if uint64(cmdSize) > uint64(len(rest)) {
		return f, malformed("command size %d exceeds the frame's remaining %d bytes", cmdSize, len(rest))
	}
	if cmdSize == 0 {
		return f, malformed("empty command")
	}
	f.Command = rest[:cmdSize]
	rest = rest[cmdSize:]
	if len(rest) == 0 {
		return f, nil
	}
	f.HasPayload = true
	if len(rest) >= 2 && binary.BigEndian.Uint16(rest) == magicBrokerEntryMetadata {
		if len(rest) < 6 {
			return f, malformed("broker entry metadata header truncated")
		}
		n := binary.BigEndian.Uint32(rest[2:])
		if uint64(n) > uint64(len(rest)-6) {
			return f, malformed("broker entry metadata size %d exceeds the frame", n)
		}
		f.BrokerEntryMetadata = rest[6 : 6+n]
		rest = rest[6+n:]
	}
	if len(rest) >= 2 && binary.BigEndian.Uint16(rest) == magicCRC32C {
		if len(rest) < 6 {
			return f, malformed("checksum header truncated")
		}
		want := binary.BigEndian.Uint32(rest[2:])
		rest = rest[6:]
		got, pc := sectionChecksum(rest)
		if got != want {
			return f, fmt.Errorf("%w: %w: computed %08x, frame says %08x", ErrMalformed, ErrChecksum, got, want)
		}
		f.Checksummed, f.PayloadCRC = true, pc
	}
	if len(rest) < 4 {
		return f, malformed("payload section of %d bytes has no metadata size", len(rest))
	}
	mdSize := binary.BigEndian.Uint32(rest)
	rest = rest[4:]
	if uint64(mdSize) > uint64(len(rest)) {
		return f, malformed("metadata size %d exceeds the frame's remaining %d bytes", mdSize, len(rest))
	}
	f.Metadata = rest[:mdSize]
	f.Payload = rest[mdSize:]
	return f, nil
}

// AppendFrame appends a simple frame (a command without payload) to dst.
func AppendFrame(dst, cmd []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(4+len(cmd)))
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(cmd)))
	return append(dst, cmd...)
}

// AppendPayloadFrame appends a payload frame (SEND or MESSAGE) to dst, with
// the CRC-32C over metadata size, metadata and payload.
func AppendPayloadFrame(dst, cmd, metadata, payload []byte) []byte {
	dst = appendPayloadHead(dst, cmd, metadata, len(payload), payloadChecksum(metadata, payload))
	return append(dst, payload...)
}

// payloadChecksum is the CRC-32C of a payload section: metadata size,
// metadata and payload, read where they lie (nothing is copied).
func payloadChecksum(metadata, payload []byte) uint32 {
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(metadata)))
	crc := crc32.Update(0, castagnoli, n[:])
	crc = crc32.Update(crc, castagnoli, metadata)
	return crc32.Update(crc, castagnoli, payload)
}

// payloadChecksumFrom is payloadChecksum given the payload's own CRC
// (pc, when Known), which it does not read again.
func payloadChecksumFrom(metadata, payload []byte, pc PayloadCRC) uint32 {
	if !pc.Known {
		return payloadChecksum(metadata, payload)
	}
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(metadata)))
	crc := crc32.Update(0, castagnoli, n[:])
	crc = crc32.Update(crc, castagnoli, metadata)
	return crc32cCombine(crc, pc.Sum, len(payload))
}

// splitCRCAbove is the payload size from which a frame's check learns the
// payload's own CRC: combining two CRCs costs about what a CRC of 2 KiB
// does, and a forwarded payload's SEND then needs one more combination
// instead of a pass over the payload.
const splitCRCAbove = 8 << 10

// sectionChecksum is the CRC-32C of a payload section as it arrived
// (metadata size, metadata, payload) and, for a payload above
// splitCRCAbove, the payload's own CRC: the same one pass over the
// bytes. A section whose metadata size does not fit is checksummed whole
// (ParseFrame refuses it).
func sectionChecksum(section []byte) (uint32, PayloadCRC) {
	if len(section) < 4 {
		return crc32.Checksum(section, castagnoli), PayloadCRC{}
	}
	mdEnd := 4 + uint64(binary.BigEndian.Uint32(section))
	if mdEnd > uint64(len(section)) || uint64(len(section))-mdEnd <= splitCRCAbove {
		return crc32.Checksum(section, castagnoli), PayloadCRC{}
	}
	payload := section[mdEnd:]
	pc := PayloadCRC{Sum: crc32.Checksum(payload, castagnoli), Known: true}
	return crc32cCombine(crc32.Checksum(section[:mdEnd], castagnoli), pc.Sum, len(payload)), pc
}

// appendPayloadHead appends a payload frame up to its payload: sizes,
// command, checksum (crc, from payloadChecksum) and metadata. The payload
// follows, appended or written from where it lies.
func appendPayloadHead(dst, cmd, metadata []byte, payloadLen int, crc uint32) []byte {
	total := 4 + len(cmd) + 2 + 4 + 4 + len(metadata) + payloadLen
	dst = binary.BigEndian.AppendUint32(dst, uint32(total))
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(cmd)))
	dst = append(dst, cmd...)
	dst = binary.BigEndian.AppendUint16(dst, magicCRC32C)
	dst = binary.BigEndian.AppendUint32(dst, crc)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(metadata)))
	return append(dst, metadata...)
}

// PayloadFrameSize is the number of bytes AppendPayloadFrame adds.
func PayloadFrameSize(cmdLen, metadataLen, payloadLen int) int {
	return 4 + 4 + cmdLen + 2 + 4 + 4 + metadataLen + payloadLen
}
