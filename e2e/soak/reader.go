package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/geo-sidecar/geo-sidecar/e2e"
)

// partitions lists every partition of every topic in namespace ns on the
// cluster behind admin (a topic that is not partitioned is its own one
// partition), leaving out Pulsar's system topics.
func partitions(admin pulsaradmin.Client, ns string) ([]string, error) {
	name, err := utils.GetNamespaceName(ns)
	if err != nil {
		return nil, err
	}
	parted, plain, err := admin.Topics().List(*name)
	if err != nil {
		return nil, fmt.Errorf("list topics of %s: %w", ns, err)
	}
	set := map[string]bool{}
	for _, t := range parted {
		tn, err := utils.GetTopicName(t)
		if err != nil {
			return nil, err
		}
		md, err := admin.Topics().GetMetadata(*tn)
		if err != nil {
			return nil, fmt.Errorf("partitions of %s: %w", t, err)
		}
		for i := range md.Partitions {
			set[fmt.Sprintf("%s-partition-%d", t, i)] = true
		}
	}
	for _, t := range plain {
		set[t] = true
	}
	var out []string
	for t := range set {
		if !strings.Contains(t, "/__") {
			out = append(out, t)
		}
	}
	sort.Strings(out)
	return out, nil
}

// javaReader runs SoakReader.java, beside this file, with the test bed's
// classpath (cluster.sh classpath); the Java client's log goes to logFile.
type javaReader struct {
	classpath, source, log4j, logFile string
}

func newJavaReader(logFile string) (*javaReader, error) {
	out, err := exec.Command(e2e.ScriptPath(), "classpath").Output()
	if err != nil {
		return nil, fmt.Errorf("cluster.sh classpath: %w", err)
	}
	lines := strings.Fields(string(out))
	if len(lines) == 0 {
		return nil, fmt.Errorf("cluster.sh classpath printed nothing")
	}
	cp, err := os.ReadFile(lines[len(lines)-1])
	if err != nil {
		return nil, fmt.Errorf("classpath file: %w", err)
	}
	_, file, _, _ := runtime.Caller(0)
	return &javaReader{classpath: strings.TrimSpace(string(cp)), source: filepath.Join(filepath.Dir(file), "SoakReader.java"),
		log4j: filepath.Join(filepath.Dir(e2e.ScriptPath()), "log4j2.xml"), logFile: logFile}, nil
}

// readLine is one line SoakReader prints: a tagged message, or (Done
// set) a partition's end.
type readLine struct {
	Partition string `json:"p"`
	Origin    string `json:"o"`
	Producer  string `json:"pr"`
	Seq       int64  `json:"s"`
	Publish   int64  `json:"t"` // Unix ms
	Pos       string `json:"pos"`
	Copy      bool   `json:"c"` // carries a sidecar's origin properties
	Done      string `json:"done"`
	Read      int64  `json:"read"`
	Untagged  int64  `json:"untagged"`
}

// PartitionRead says how many messages the reader read in a partition
// and how many of them had no soak tag (geo-sidecar's markers).
type PartitionRead struct {
	Cluster, Partition string
	Read, Untagged     int64
}

// readLimit bounds one cluster's read.
const readLimit = 15 * time.Minute

// read reads every partition on cluster to its end, in one JVM.
func (j *javaReader) read(cluster string, parts []string) ([]Read, []PartitionRead, error) {
	if len(parts) == 0 {
		return nil, nil, nil
	}
	args := append([]string{"-cp", j.classpath, "-Dlog4j.configurationFile=" + j.log4j,
		"-Dpulsar.log.file=" + j.logFile, "-XX:TieredStopAtLevel=1", j.source, e2e.Get(cluster).ServiceURL}, parts...)
	// Bounded like every step of the run: a 30-minute soak's partitions
	// read in about a minute.
	ctx, cancel := context.WithTimeout(context.Background(), readLimit)
	defer cancel()
	cmd := exec.CommandContext(ctx, "java", args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, nil, fmt.Errorf("SoakReader on %s: %w\n%s", cluster, err, lastBytes(stderr.Bytes(), 4096))
	}
	var reads []Read
	var done []PartitionRead
	sc := bufio.NewScanner(&stdout)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		l := sc.Bytes()
		if !bytes.HasPrefix(l, []byte("{")) {
			continue
		}
		var m readLine
		if err := json.Unmarshal(l, &m); err != nil {
			return nil, nil, fmt.Errorf("SoakReader on %s: %w in %s", cluster, err, l)
		}
		if m.Done != "" {
			done = append(done, PartitionRead{Cluster: cluster, Partition: m.Done, Read: m.Read, Untagged: m.Untagged})
			continue
		}
		reads = append(reads, Read{Cluster: cluster, Partition: m.Partition, Origin: m.Origin, Producer: m.Producer,
			Seq: m.Seq, Publish: time.UnixMilli(m.Publish), Pos: m.Pos, Copy: m.Copy})
	}
	if err := sc.Err(); err != nil {
		return nil, nil, err
	}
	if len(done) != len(parts) {
		return nil, nil, fmt.Errorf("SoakReader on %s finished %d of %d partitions", cluster, len(done), len(parts))
	}
	return reads, done, nil
}

func lastBytes(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
