package consul

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"

	"github.com/hashicorp/consul/api"
)

// Reading KV entries that anyone with write access to a prefix may have
// written. Consul bounds a value at 512 KiB and the number of keys not at
// all, and a List answer carries every value in base64 inside JSON: read
// whole, a prefix is as large as its writers made it. So the readers of
// this package never List a prefix. They list its keys (no values), ask
// Consul in read-only transactions which keys changed and which are held
// by a session (no values either), and read only the entries they will
// use, one by one, each answer bounded by its own value's bound before
// any of it is decoded (withResponseLimit).

// MaxTxnChecks is the most operations one transaction carries: Consul
// refuses more than 64 in a transaction before 1.7 and 128 since.
const MaxTxnChecks = 64

// kvAnswerBytes bounds the answer to a read of key whose value is at most
// value bytes: the value in base64 and the rest of the entry's JSON (the
// key escaped, the session, flags and indexes).
func KVAnswerBytes(key string, value int) int64 {
	return int64(base64.StdEncoding.EncodedLen(value) + 6*len(key) + 512)
}

// getBounded reads key with q (a blocking query when q.WaitIndex is set),
// its answer bounded by what a value of maxValue bytes takes: a larger
// entry fails with an error wrapping ErrResponseTooLarge (tooLargeIndex
// tells its ModifyIndex) after at most that many bytes were read, none of
// them decoded. The pair is nil when the key does not exist.
func GetBounded(ctx context.Context, c *api.Client, key string, maxValue int, q api.QueryOptions) (*api.KVPair, *api.QueryMeta, error) {
	lctx, lim := WithResponseLimit(ctx, KVAnswerBytes(key, maxValue))
	pair, meta, err := c.KV().Get(key, q.WithContext(lctx))
	if err == nil {
		err = lim.Check()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("consul kv %q: %w", key, err)
	}
	if pair != nil && len(pair.Value) > maxValue {
		// Only a value shorter than its JSON overhead allowance gets here.
		return nil, nil, fmt.Errorf("consul kv %q: %d bytes, more than %d: %w", key, len(pair.Value), maxValue, ErrResponseTooLarge)
	}
	return pair, meta, nil
}

// listKeys lists the keys under dir, one level deep (a deeper key shows as
// its folder, "dir/name/"), blocking from index when it is not 0; the
// answer is bounded at maxBytes.
func ListKeys(ctx context.Context, c *api.Client, dir string, maxBytes int64, q api.QueryOptions) ([]string, *api.QueryMeta, error) {
	lctx, lim := WithResponseLimit(ctx, maxBytes)
	keys, meta, err := c.KV().Keys(dir, "/", q.WithContext(lctx))
	if err == nil {
		err = lim.Check()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("consul kv keys %q: %w", dir, err)
	}
	return keys, meta, nil
}

// KVCheck is what Consul said of one key without reading its value.
type KVCheck struct {
	// Unchanged is true when the key still has the ModifyIndex it was
	// checked against (never for a key checked against 0).
	Unchanged bool
	// Unheld is true when no session holds the key (a key that is gone
	// counts as held: the read that follows finds it gone).
	Unheld bool
}

// checkKeys asks Consul, in read-only transactions of check operations
// (Consul returns no value for those), whether each key still has the
// ModifyIndex index(key) returns (when above 0) and whether a session
// holds it. A check-session with no session passes exactly when the key
// has none; a check-index passes exactly when the index is the key's.
// Every answer is bounded by what its operations' errors can take.
func CheckKeys(ctx context.Context, c *api.Client, keys []string, index func(string) uint64) ([]KVCheck, error) {
	out := make([]KVCheck, len(keys))
	type opOf struct {
		key   int
		index bool // the check-index, else the check-session
	}
	var ops api.TxnOps
	var of []opOf
	var bound int64
	flush := func() error {
		if len(ops) == 0 {
			return nil
		}
		failed, err := RunChecks(ctx, c, ops, bound)
		if err != nil {
			return err
		}
		for i, o := range of {
			if failed[i] {
				continue
			}
			if o.index {
				out[o.key].Unchanged = true
			} else {
				out[o.key].Unheld = true
			}
		}
		ops, of, bound = ops[:0], of[:0], 0
		return nil
	}
	for i, k := range keys {
		if len(ops)+2 > MaxTxnChecks {
			if err := flush(); err != nil {
				return nil, err
			}
		}
		if idx := index(k); idx > 0 {
			ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCheckIndex, Key: k, Index: idx}})
			of = append(of, opOf{key: i, index: true})
		}
		ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCheckSession, Key: k}})
		of = append(of, opOf{key: i})
		// An operation's answer is an entry without its value or an
		// error naming the key (and a session id) once.
		bound += int64(8*len(k) + 512)
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return out, nil
}

// runChecks runs one transaction of check operations and returns, by
// operation, whether it failed.
func RunChecks(ctx context.Context, c *api.Client, ops api.TxnOps, bound int64) ([]bool, error) {
	lctx, lim := WithResponseLimit(ctx, bound+1024)
	ok, resp, _, err := c.Txn().Txn(ops, (&api.QueryOptions{}).WithContext(lctx))
	if err == nil {
		err = lim.Check()
	}
	if err != nil {
		return nil, fmt.Errorf("consul txn of %d checks: %w", len(ops), err)
	}
	failed := make([]bool, len(ops))
	if ok {
		return failed, nil
	}
	if resp == nil || len(resp.Errors) == 0 {
		return nil, errors.New("consul txn: refused without saying which check failed")
	}
	for _, e := range resp.Errors {
		if e.OpIndex < 0 || e.OpIndex >= len(ops) {
			return nil, fmt.Errorf("consul txn: an error for operation %d of %d", e.OpIndex, len(ops))
		}
		failed[e.OpIndex] = true
	}
	return failed, nil
}
