package publisher

import "github.com/etcdns/etcdns/publisher/plan"

type planOp = plan.Op
