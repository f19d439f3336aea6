package snap

import "github.com/etcdns/etcdns/server/skydns"

// A SkyDNS zone (Config.SkyDNS) holds its values in a skydns.Tree, not in
// names: CoreDNS's etcd plugin answers a name from its whole subtree, which
// the exact-name nodes cannot give. Its batches write the tree alone.

// PutSkyDNS stores a value of a SkyDNS zone; a malformed one removes what
// the key held and is returned as the error.
func (b *Batch) PutSkyDNS(key string, value []byte, leased bool) error {
	if leased {
		return b.sky().PutLeased(key, value)
	}
	return b.sky().Put(key, value)
}

// DeleteSkyDNS removes a key of a SkyDNS zone.
func (b *Batch) DeleteSkyDNS(key string) { b.sky().Delete(key) }

func (b *Batch) sky() *skydns.Batch {
	if b.skyBatch == nil {
		b.skyBatch = b.z.Sky.Edit()
	}
	return b.skyBatch
}

// doneSkyDNS publishes the batch's tree, if it wrote one.
func (b *Batch) doneSkyDNS() {
	if b.skyBatch != nil {
		b.z.Sky = b.skyBatch.Done()
		b.z.Records = b.z.Sky.Len()
		b.skyBatch = nil
	}
}
