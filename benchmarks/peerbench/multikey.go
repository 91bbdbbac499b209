// Range reads and two-key writes (issue 27), in etcd and leased mode: the
// same keys, values and concurrency on both sides.
//
//	etcd.range{100,1000}[.keysonly].seq, .c8    linearizable Get WithPrefix of n keys
//	leased.list{100,1000}[.keysonly].seq, .c8   uncached client.List of the same keys
//	etcd.txn2.seq, .c8                          Txn: two ModRevision compares, two Puts
//	leased.txn2.seq, .c8                        client.Txn: two VersionIs compares, two PutOps
//	etcd.put2.seq, .c8 / leased.put2.seq, .c8   the two Puts one after the other, no transaction
//
// .seq is one goroutine, .c8 eight at once over the -clients instances.

package main

import (
	"context"
	"fmt"
	"slices"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leased/leased/client"
)

// multiConc is the concurrency of the .c8 rows.
const multiConc = 8

// loadFunc runs one load test (etcdTests' and leasedTests' simple): its
// name, goroutines and op.
type loadFunc func(name string, conc int, op func(g int) error)

// anyWanted says whether -only/-skip select one of names.
func anyWanted(names ...string) bool {
	return slices.ContainsFunc(names, func(name string) bool { return wanted(tname(name)) })
}

// rangeNames are the three rows of a range of n keys: with values, keys
// only, and with values eight at once.
func rangeNames(peer, verb string, n int) []string {
	return []string{
		fmt.Sprintf("%s.%s%d.seq", peer, verb, n),
		fmt.Sprintf("%s.%s%d.keysonly.seq", peer, verb, n),
		fmt.Sprintf("%s.%s%d.c%d", peer, verb, n, multiConc),
	}
}

// rangePrefix holds the n keys of the range rows, /bench/range<n>/0000 to
// /bench/range<n>/<n-1>.
func rangePrefix(n int) string { return fmt.Sprintf("/bench/range%d/", n) }

// pairKeys returns goroutine g's two private keys under dir (/bench/txn2
// or /bench/put2): no other goroutine writes them, so the compares of its
// transactions hold.
func pairKeys(dir string, g int) [2]string {
	return [2]string{fmt.Sprintf("%s/%03d/a", dir, g), fmt.Sprintf("%s/%03d/b", dir, g)}
}

// ---------------------------------------------------------------- etcd

// etcdMultiKey runs the etcd range, txn2 and put2 rows; called by
// etcdTests with its clients and load runner.
func etcdMultiKey(ctx context.Context, cl []*clientv3.Client, simple loadFunc) {
	c0 := cl[0]
	val := string(value(0))
	for _, n := range []int{100, 1000} {
		prefix, names := rangePrefix(n), rangeNames("etcd", "range", n)
		if !anyWanted(names...) {
			continue
		}
		for i := range n {
			_, err := c0.Put(ctx, fmt.Sprintf("%s%04d", prefix, i), val)
			must(err)
		}
		rangeOp := func(opts ...clientv3.OpOption) func(g int) error {
			opts = append(opts, clientv3.WithPrefix())
			return func(g int) error {
				r, err := cl[g%len(cl)].Get(ctx, prefix, opts...)
				if err == nil && len(r.Kvs) != n {
					return fmt.Errorf("range of %s: %d keys, want %d", prefix, len(r.Kvs), n)
				}
				return err
			}
		}
		simple(names[0], 1, rangeOp())
		simple(names[1], 1, rangeOp(clientv3.WithKeysOnly()))
		simple(names[2], multiConc, rangeOp())
	}

	if anyWanted("etcd.txn2.seq", fmt.Sprintf("etcd.txn2.c%d", multiConc)) {
		// rev[g] is the ModRevision of goroutine g's keys as it last wrote
		// them; after a failure it writes them again to learn it.
		keys := make([][2]string, multiConc)
		rev := make([][2]int64, multiConc)
		stale := make([]bool, multiConc)
		resync := func(g int) error {
			for i, k := range keys[g] {
				r, err := cl[g%len(cl)].Put(ctx, k, val)
				if err != nil {
					return err
				}
				rev[g][i] = r.Header.Revision
			}
			stale[g] = false
			return nil
		}
		for g := range keys {
			keys[g] = pairKeys("/bench/txn2", g)
			must(resync(g))
		}
		txn := func(g int) error {
			if stale[g] {
				if err := resync(g); err != nil {
					return err
				}
			}
			k := keys[g]
			r, err := cl[g%len(cl)].Txn(ctx).If(
				clientv3.Compare(clientv3.ModRevision(k[0]), "=", rev[g][0]),
				clientv3.Compare(clientv3.ModRevision(k[1]), "=", rev[g][1]),
			).Then(clientv3.OpPut(k[0], val), clientv3.OpPut(k[1], val)).Commit()
			switch {
			case err != nil:
				stale[g] = true
				return err
			case !r.Succeeded:
				stale[g] = true
				return fmt.Errorf("txn on %s, %s: a compare failed (mod revisions %d, %d expected)", k[0], k[1], rev[g][0], rev[g][1])
			}
			rev[g] = [2]int64{r.Header.Revision, r.Header.Revision}
			return nil
		}
		simple("etcd.txn2.seq", 1, txn)
		simple(fmt.Sprintf("etcd.txn2.c%d", multiConc), multiConc, txn)
	}

	if anyWanted("etcd.put2.seq", fmt.Sprintf("etcd.put2.c%d", multiConc)) {
		keys := make([][2]string, multiConc)
		for g := range keys {
			keys[g] = pairKeys("/bench/put2", g)
		}
		put2 := func(g int) error {
			for _, k := range keys[g] {
				if _, err := cl[g%len(cl)].Put(ctx, k, val); err != nil {
					return err
				}
			}
			return nil
		}
		simple("etcd.put2.seq", 1, put2)
		simple(fmt.Sprintf("etcd.put2.c%d", multiConc), multiConc, put2)
	}
}

// ---------------------------------------------------------------- leased

// leasedMultiKey runs the leased list, txn2 and put2 rows; called by
// leasedTests with its clients and load runner.
func leasedMultiKey(ctx context.Context, cl []*client.Client, simple loadFunc) {
	c0 := cl[0]
	val := value(0)
	for _, n := range []int{100, 1000} {
		prefix, names := rangePrefix(n), rangeNames("leased", "list", n)
		if !anyWanted(names...) {
			continue
		}
		for i := range n {
			_, err := c0.Put(ctx, fmt.Sprintf("%s%04d", prefix, i), val)
			must(err)
		}
		listOp := func(opts ...client.ListOption) func(g int) error {
			return func(g int) error {
				r, err := cl[g%len(cl)].List(ctx, prefix, opts...)
				if err == nil && (len(r.KVs) != n || r.More) {
					return fmt.Errorf("list of %s: %d keys, more %v; want %d", prefix, len(r.KVs), r.More, n)
				}
				return err
			}
		}
		simple(names[0], 1, listOp())
		simple(names[1], 1, listOp(client.KeysOnly()))
		simple(names[2], multiConc, listOp())
	}

	if anyWanted("leased.txn2.seq", fmt.Sprintf("leased.txn2.c%d", multiConc)) {
		// ver[g] is the version of goroutine g's keys as it last wrote
		// them (a transaction's Revision); after a failure it writes them
		// again to learn it.
		keys := make([][2]string, multiConc)
		ver := make([][2]uint64, multiConc)
		stale := make([]bool, multiConc)
		resync := func(g int) error {
			for i, k := range keys[g] {
				v, err := cl[g%len(cl)].Put(ctx, k, val)
				if err != nil {
					return err
				}
				ver[g][i] = v
			}
			stale[g] = false
			return nil
		}
		for g := range keys {
			keys[g] = pairKeys("/bench/txn2", g)
			must(resync(g))
		}
		txn := func(g int) error {
			if stale[g] {
				if err := resync(g); err != nil {
					return err
				}
			}
			k := keys[g]
			r, err := cl[g%len(cl)].Txn(ctx).
				If(client.VersionIs(k[0], ver[g][0]), client.VersionIs(k[1], ver[g][1])).
				Then(client.PutOp(k[0], val), client.PutOp(k[1], val)).Commit()
			switch {
			case err != nil:
				stale[g] = true
				return err
			case !r.Succeeded:
				stale[g] = true
				return fmt.Errorf("txn on %s, %s: a compare failed (versions %d, %d expected)", k[0], k[1], ver[g][0], ver[g][1])
			}
			ver[g] = [2]uint64{r.Revision, r.Revision}
			return nil
		}
		simple("leased.txn2.seq", 1, txn)
		simple(fmt.Sprintf("leased.txn2.c%d", multiConc), multiConc, txn)
	}

	if anyWanted("leased.put2.seq", fmt.Sprintf("leased.put2.c%d", multiConc)) {
		keys := make([][2]string, multiConc)
		for g := range keys {
			keys[g] = pairKeys("/bench/put2", g)
		}
		put2 := func(g int) error {
			for _, k := range keys[g] {
				if _, err := cl[g%len(cl)].Put(ctx, k, val); err != nil {
					return err
				}
			}
			return nil
		}
		simple("leased.put2.seq", 1, put2)
		simple(fmt.Sprintf("leased.put2.c%d", multiConc), multiConc, put2)
	}
}
