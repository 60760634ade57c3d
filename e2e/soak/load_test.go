package main

import (
	"bytes"
	"testing"
)

// TestLargeSize: every LargeEvery-th message, from the first, is large,
// 1 to 4 MiB, the same size for the same producer and number; a topic
// without LargeEvery has none.
func TestLargeSize(t *testing.T) {
	tk := topicKind{Short: "single", LargeEvery: 500}
	sizes := map[int]bool{}
	for seq := int64(0); seq < 50000; seq++ {
		n := largeSize(tk, "east-single", seq)
		if (seq%500 == 0) != (n > 0) {
			t.Fatalf("seq %d: size %d", seq, n)
		}
		if n > 0 {
			if n < largeMin || n > largeMax {
				t.Fatalf("seq %d: size %d out of [%d, %d]", seq, n, largeMin, largeMax)
			}
			if again := largeSize(tk, "east-single", seq); again != n {
				t.Fatalf("seq %d: size %d, then %d", seq, n, again)
			}
			sizes[n] = true
		}
	}
	if len(sizes) < 90 {
		t.Errorf("%d distinct sizes over 100 large messages", len(sizes))
	}
	if n := largeSize(topicKind{Short: "parted"}, "east-parted", 0); n != 0 {
		t.Errorf("a topic without large messages: %d", n)
	}
}

// TestPayload: a small payload is the producer and number; a large one
// begins with them, has its size, and is the same for the same message.
func TestPayload(t *testing.T) {
	small := payload("east-plain", 7, 0)
	if string(small) != "east-plain 7 00000000000000000000000000000007" {
		t.Errorf("small: %q", small)
	}
	large := payload("east-plain", 7, 1<<20+3)
	if len(large) != 1<<20+3 || !bytes.HasPrefix(large, small) {
		t.Fatalf("large: %d bytes, prefix %q", len(large), large[:len(small)])
	}
	if !bytes.Equal(large, payload("east-plain", 7, 1<<20+3)) {
		t.Error("the same message's payload differs")
	}
	if bytes.Count(large[len(small):], []byte{0}) > len(large)/100 {
		t.Error("large payload mostly zeros (compressible)")
	}
}
