package publisher

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/etcdns/etcdns/publisher/elect"
	"github.com/etcdns/etcdns/publisher/etcdstore"
	"github.com/etcdns/etcdns/publisher/plan"
)

// Withdrawal is what Withdraw removed, or would remove with DryRun.
type Withdrawal struct {
	Keys    []string // sorted
	Sources int
}

// WithdrawOptions say which cluster leaves and how its records are removed.
type WithdrawOptions struct {
	Store       *etcdstore.Store
	Ranges      []string
	Cluster     string
	Term        *elect.Term // the cluster's leadership, held for the withdrawal
	MaxTxnOps   int
	MaxTxnBytes int
	DryRun      bool
}

// Withdraw removes every record the cluster owns in the ranges: how a
// cluster leaves the set, run by its own operator or, once the cluster is
// gone, by anyone with its id. Ownership is the `cluster` field, so the
// other clusters' records in the shared trees are never touched. Each
// delete is guarded by the revision it was read at: a key rewritten since
// then is read again rather than removed blindly.
func Withdraw(ctx context.Context, o WithdrawOptions) (Withdrawal, error) {
	var w Withdrawal
	for attempt := 1; ; attempt++ {
		kvs, _, err := o.Store.Load(ctx, o.Ranges)
		if err != nil {
			return w, err
		}
		idx, _ := plan.Load(o.Cluster, kvs)
		var ops []plan.Op
		sources := idx.Sources()
		for _, s := range sources {
			for k, e := range idx.Owned(s) {
				ops = append(ops, plan.Op{Kind: plan.Delete, Key: k, ModRev: e.ModRev})
			}
		}
		sort.Slice(ops, func(i, j int) bool { return ops[i].Key < ops[j].Key })
		if w.Sources == 0 {
			w.Sources = len(sources)
		}
		if o.DryRun {
			for _, op := range ops {
				w.Keys = append(w.Keys, op.Key)
			}
			return w, nil
		}
		conflict := false
		for _, t := range plan.Split(ops, o.MaxTxnOps, o.MaxTxnBytes) {
			fence, _ := o.Term.Fence()
			_, err := o.Store.Apply(ctx, fence, t)
			if errors.Is(err, etcdstore.ErrConflict) {
				conflict = true
				continue
			}
			if err != nil {
				return w, err
			}
			for _, op := range t {
				w.Keys = append(w.Keys, op.Key)
			}
		}
		if !conflict {
			sort.Strings(w.Keys)
			return w, nil
		}
		if attempt == maxAttempts {
			return w, fmt.Errorf("records of cluster %s kept changing during the withdrawal; is its publisher still running?", o.Cluster)
		}
	}
}
