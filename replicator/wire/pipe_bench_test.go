package wire

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// pipeBroker is a loopback broker for the pipe benchmark, as cheap as it
// can be so that the client's cost dominates: it streams one prebuilt
// entry to a consumer as fast as its permits allow, and answers every SEND
// with its receipt. It reads with a buffer, writes in batches, and does not
// verify checksums.
type pipeBroker struct {
	ln      net.Listener
	tail    []byte // a MESSAGE frame's payload section: magic, CRC, metadata, payload
	perMsgs int    // messages per entry
	acks    atomic.Int64
	wg      sync.WaitGroup
}

func newPipeBroker(b testing.TB, md, payload []byte, msgs int) *pipeBroker {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	full := AppendPayloadFrame(nil, nil, md, payload)
	pb := &pipeBroker{ln: ln, tail: full[8:], perMsgs: msgs}
	pb.wg.Add(1)
	go func() {
		defer pb.wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			pb.wg.Add(1)
			go func() {
				defer pb.wg.Done()
				pb.serve(nc)
			}()
		}
	}()
	b.Cleanup(func() {
		ln.Close()
		pb.wg.Wait()
	})
	return pb
}

func (pb *pipeBroker) url() string { return "pulsar://" + pb.ln.Addr().String() }

func (pb *pipeBroker) serve(nc net.Conn) {
	defer nc.Close()
	r := bufio.NewReaderSize(nc, 256<<10)
	var wmu sync.Mutex
	w := bufio.NewWriterSize(nc, 256<<10)
	var permits int64
	var consumerID, nextEntry uint64
	cond := sync.NewCond(&wmu)
	done := make(chan struct{})
	defer close(done)
	defer cond.Broadcast()
	send := func(body Body) {
		w.Write(AppendFrame(nil, AppendCommand(nil, body)))
	}
	// The dispatcher streams entries while permits last.
	go func() {
		var cmd []byte
		var hdr [8]byte
		wmu.Lock()
		defer wmu.Unlock()
		for {
			for permits <= 0 {
				select {
				case <-done:
					return
				default:
				}
				w.Flush()
				cond.Wait()
			}
			select {
			case <-done:
				return
			default:
			}
			nextEntry++
			cmd = AppendCommand(cmd[:0], &Message{ConsumerID: consumerID, MessageID: EntryID(1, nextEntry)})
			binary.BigEndian.PutUint32(hdr[:], uint32(4+len(cmd)+len(pb.tail)))
			binary.BigEndian.PutUint32(hdr[4:], uint32(len(cmd)))
			w.Write(hdr[:])
			w.Write(cmd)
			w.Write(pb.tail)
			permits -= int64(pb.perMsgs)
		}
	}()
	var buf []byte
	for {
		var hdr [4]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint32(hdr[:]))
		if cap(buf) < n {
			buf = make([]byte, n)
		}
		buf = buf[:n]
		if _, err := io.ReadFull(r, buf); err != nil {
			return
		}
		cmdLen := binary.BigEndian.Uint32(buf)
		cmd, err := DecodeCommand(buf[4 : 4+cmdLen])
		if err != nil {
			panic(err)
		}
		wmu.Lock()
		switch c := cmd.Body.(type) {
		case *Connect:
			send(&Connected{ServerVersion: "pipe", ProtocolVersion: ProtocolVersion, MaxMessageSize: DefaultMaxMessageSize})
		case *Lookup:
			send(&LookupResponse{RequestID: c.RequestID, Kind: LookupConnect, BrokerServiceURL: pb.url()})
		case *ProducerCommand:
			send(&ProducerSuccess{RequestID: c.RequestID, ProducerName: c.ProducerName, LastSequenceID: -1})
		case *SubscribeCommand:
			consumerID = c.ConsumerID
			send(&Success{RequestID: c.RequestID})
		case *CloseProducer:
			send(&Success{RequestID: c.RequestID})
		case *CloseConsumer:
			send(&Success{RequestID: c.RequestID})
		case *Flow:
			permits += int64(c.Permits)
			cond.Broadcast()
		case *Ack:
			pb.acks.Add(int64(len(c.MessageIDs)))
		case *Send:
			send(&SendReceipt{ProducerID: c.ProducerID, SequenceID: c.SequenceID, MessageID: EntryID(2, c.SequenceID)})
		case *Ping:
			send(&Pong{})
		}
		if r.Buffered() == 0 {
			w.Flush()
		}
		wmu.Unlock()
	}
}

// pipeBrokerEnv, when set in a test binary's environment, makes
// TestPipeBrokerProcess serve two pipe brokers (source and target) for a
// parent benchmark: "MSGS:SIZE". It prints their addresses and serves until
// its stdin closes.
const pipeBrokerEnv = "WIRE_PIPE_BROKER"

func TestPipeBrokerProcess(t *testing.T) {
	spec := os.Getenv(pipeBrokerEnv)
	if spec == "" {
		t.Skip("runs only as BenchmarkPipe's broker process")
	}
	msgsStr, sizeStr, _ := strings.Cut(spec, ":")
	msgs, _ := strconv.Atoi(msgsStr)
	size, _ := strconv.Atoi(sizeStr)
	md, payload := pipeEntry(int32(msgs), size)
	src := newPipeBroker(t, md, payload, max(msgs, 1))
	dst := newPipeBroker(t, md, payload, 1)
	fmt.Printf("%s %s\n", src.url(), dst.url())
	_, _ = io.Copy(io.Discard, os.Stdin)
}

func pipeEntry(msgs int32, size int) (md, payload []byte) {
	md = MetadataBuilder{ProducerName: "producer-1", SequenceID: 1, PublishTime: 1700000000000,
		NumMessagesInBatch: msgs}.Append(nil)
	return md, make([]byte, size)
}

// startPipeBrokers runs the source and target brokers in a child process
// (this test binary again), so that the benchmark process's CPU time is the
// client's alone.
func startPipeBrokers(b *testing.B, msgs int32, size int) (srcURL, dstURL string) {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^TestPipeBrokerProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d:%d", pipeBrokerEnv, msgs, size))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		stdin.Close()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		b.Fatal(err)
	}
	if _, err := fmt.Sscan(line, &srcURL, &dstURL); err != nil {
		b.Fatalf("broker process said %q: %v", line, err)
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	return srcURL, dstURL
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkPipe models the entry pipe end to end over loopback, one op per
// entry: receive an entry from one broker, parse and patch its metadata,
// send it to another broker, and on its receipt acknowledge it and release
// its permits from a second goroutine (the acker). The brokers run in a
// child process: cpu-ns/op is this process's CPU (user and system) per
// entry, the client's cost, less noisy than ns/op on a shared machine;
// allocs/op and B/op are per entry too.
func BenchmarkPipe(b *testing.B) {
	for _, tc := range []struct {
		name    string
		msgs    int32 // messages per entry
		size    int   // payload bytes
		recycle bool  // ConsumerOptions.RecycleOnRelease
		crc     bool  // Outgoing.PayloadCRC from Entry.PayloadCRC
	}{
		{"1KiB", 0, 1 << 10, false, false},
		{"batch127x1KiB", 127, 127 << 10, false, false},
		{"batch127x1KiB-crc", 127, 127 << 10, false, true},
		{"batch127x1KiB-recycle", 127, 127 << 10, true, false},
		{"batch127x1KiB-recycle-crc", 127, 127 << 10, true, true}, // the entry path's
	} {
		b.Run(tc.name, func(b *testing.B) {
			srcURL, dstURL := startPipeBrokers(b, tc.msgs, tc.size)
			ctx := context.Background()
			sc, err := NewClient(ClientOptions{ServiceURL: srcURL})
			if err != nil {
				b.Fatal(err)
			}
			defer sc.Close()
			dc, err := NewClient(ClientOptions{ServiceURL: dstURL})
			if err != nil {
				b.Fatal(err)
			}
			defer dc.Close()
			cons, err := Subscribe(ctx, sc, ConsumerOptions{Topic: "t", Subscription: "s", Permits: 1000, RecycleOnRelease: tc.recycle})
			if err != nil {
				b.Fatal(err)
			}
			defer cons.Close()
			prod, err := CreateProducer(ctx, dc, ProducerOptions{Topic: "t", Name: "bench", MaxPending: 1000})
			if err != nil {
				b.Fatal(err)
			}
			defer prod.Close()

			type inflight struct {
				e   Entry
				err error
			}
			results := make(chan *inflight, 1001)
			ackerDone := make(chan struct{})
			go func() {
				defer close(ackerDone)
				for f := range results {
					if f.err != nil {
						panic(f.err)
					}
					_ = cons.Ack(f.e.ID)
					_ = cons.Release(f.e)
				}
			}()
			b.SetBytes(int64(tc.size))
			b.ReportAllocs()
			seq := uint64(0)
			cpu0 := cpuTime()
			for b.Loop() {
				e, err := cons.Receive(ctx)
				if err != nil {
					b.Fatal(err)
				}
				m, err := ParseMetadata(e.Metadata)
				if err != nil {
					b.Fatal(err)
				}
				oid := strconv.FormatUint(e.ID.Ledger, 10) + ":" + strconv.FormatUint(e.ID.Entry, 10)
				patched, err := PatchMetadata(make([]byte, 0, len(e.Metadata)+128), e.Metadata, Patch{ReplicatedFrom: "east",
					Properties: []KeyValue{{"geo-sidecar.origin-id", oid}}, DropTxn: m.HasTxnID})
				if err != nil {
					b.Fatal(err)
				}
				f := &inflight{e: e}
				seq++
				out := Outgoing{Metadata: patched, Payload: e.Payload, NumMessages: e.NumMessages, SequenceID: seq}
				if tc.crc {
					out.PayloadCRC = e.PayloadCRC
				}
				if err := prod.Send(ctx, out, func(_ Receipt, err error) {
					f.err = err
					results <- f
				}); err != nil {
					b.Fatal(err)
				}
			}
			if err := prod.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			close(results)
			<-ackerDone
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}
