package batch

import (
	"bytes"
	"compress/zlib"
	"fmt"
	"io"
	"sync"

	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// Codecs: MessageMetadata.compression's values.
const (
	None   int32 = 0
	LZ4    int32 = 1
	ZLIB   int32 = 2
	ZSTD   int32 = 3
	Snappy int32 = 4
)

// CodecName names a codec for messages.
func CodecName(codec int32) string {
	switch codec {
	case None:
		return "NONE"
	case LZ4:
		return "LZ4"
	case ZLIB:
		return "ZLIB"
	case ZSTD:
		return "ZSTD"
	case Snappy:
		return "SNAPPY"
	}
	return fmt.Sprintf("compression %d", codec)
}

// Decompress returns payload decompressed with codec, which must give
// exactly size bytes (MessageMetadata.uncompressed_size). Pulsar's
// clients write LZ4 as a raw block, ZLIB as a zlib stream, ZSTD as a
// frame and Snappy as a raw block. With None, payload is returned as
// it is.
func Decompress(codec int32, payload []byte, size uint32) ([]byte, error) {
	if size > MaxSize {
		return nil, malformed("uncompressed size %d: more than %d", size, MaxSize)
	}
	var (
		out []byte
		err error
	)
	switch codec {
	case None:
		return payload, nil
	case LZ4:
		out = make([]byte, size)
		var n int
		if n, err = lz4.UncompressBlock(payload, out); err == nil {
			out = out[:n]
		}
	case ZLIB:
		var r io.ReadCloser
		if r, err = zlib.NewReader(bytes.NewReader(payload)); err == nil {
			// One byte more than said, to tell a longer stream.
			out, err = io.ReadAll(io.LimitReader(r, int64(size)+1))
			r.Close()
		}
	case ZSTD:
		// At most size bytes (WithDecodeAllCapLimit): more is an error.
		out, err = zstdDecoder().DecodeAll(payload, make([]byte, 0, size))
	case Snappy:
		var n int
		if n, err = snappy.DecodedLen(payload); err == nil {
			if n != int(size) {
				return nil, malformed("%s: %d bytes, the metadata says %d", CodecName(codec), n, size)
			}
			out, err = snappy.Decode(make([]byte, n), payload)
		}
	default:
		return nil, fmt.Errorf("%w: %d", ErrCodec, codec)
	}
	if err != nil {
		return nil, malformed("%s: %v", CodecName(codec), err)
	}
	if len(out) != int(size) {
		return nil, malformed("%s: %d bytes, the metadata says %d", CodecName(codec), len(out), size)
	}
	return out, nil
}

// Compress returns raw compressed with codec, as Pulsar's clients
// compress (see Decompress): any of their consumers decompresses it.
func Compress(codec int32, raw []byte) ([]byte, error) {
	switch codec {
	case None:
		return raw, nil
	case LZ4:
		out := make([]byte, lz4.CompressBlockBound(len(raw)))
		var c lz4.Compressor
		n, err := c.CompressBlock(raw, out)
		if err != nil {
			return nil, fmt.Errorf("LZ4: %w", err)
		}
		return out[:n], nil
	case ZLIB:
		var b bytes.Buffer
		w := zlib.NewWriter(&b)
		if _, err := w.Write(raw); err != nil {
			return nil, fmt.Errorf("ZLIB: %w", err)
		}
		if err := w.Close(); err != nil {
			return nil, fmt.Errorf("ZLIB: %w", err)
		}
		return b.Bytes(), nil
	case ZSTD:
		return zstdEncoder().EncodeAll(raw, nil), nil
	case Snappy:
		return snappy.Encode(nil, raw), nil
	}
	return nil, fmt.Errorf("%w: %d", ErrCodec, codec)
}

// The zstd coders are safe for concurrent DecodeAll and EncodeAll, and
// costly to make: one each per process, made when first needed.
var (
	zstdDec = sync.OnceValue(func() *zstd.Decoder {
		d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(MaxSize), zstd.WithDecodeAllCapLimit(true))
		if err != nil {
			panic(err) // only for invalid options
		}
		return d
	})
	zstdEnc = sync.OnceValue(func() *zstd.Encoder {
		e, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
		if err != nil {
			panic(err) // only for invalid options
		}
		return e
	})
)

func zstdDecoder() *zstd.Decoder { return zstdDec() }
func zstdEncoder() *zstd.Encoder { return zstdEnc() }
