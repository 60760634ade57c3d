// Package entrypath is the data path: it copies each stored entry of a
// local partition whole to the same partition on a remote cluster, over
// the project's binary-protocol client (replicator/wire), and
// acknowledges the local cursor only after the remote confirmed, in
// order. Everything that loss, duplicates and stalls depend on is here.
//
// Files, from the top down (each uses only files after it):
// how sessions follow one another and Partition.Run (entrysessions.go);
// one session of a partition (session.go); the step-down of a session
// whose remote is out of reach (stepdown.go); the pipe's rules for each
// entry (entrypipe.go) and why a session ends (sessionend.go); the
// Partition and what it is built from (partition.go); its two ends over
// the wire client (entryends.go, with their link's health in
// linkhealth.go); the contracts with the ends and the subscription sync
// (contracts.go); the read-back budget (readbackpool.go) and the
// read-back of the remote that proves which copies are there
// (entryreadback.go); the sequence ids of the copies and their epochs
// (seqid.go); the receive and in-flight budgets (receivepool.go,
// budgets.go). Which entries are forwarded, which are markers and what
// a copy's origin proves are the entry rules of replicator/entryrule,
// shared with verify.
//
// It exists apart from the pair lifecycle (replicator) and from
// subscription sync (subsync) so that the rules that keep messages from
// being lost are read, tested and mutated in one place: the sync is fed
// through the SyncFeed interface declared here, and never reached into.
//
// A Partition is run by one goroutine (Run), which starts and waits for
// the sync's and the acknowledger's. TargetBudgets, ByteBudget,
// ReceivePools and ReceivePool are safe for concurrent use and shared by
// the partitions of a target.
package entrypath
