package etcdclient

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"time"

	"go.etcd.io/etcd/api/v3/authpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdns/etcdns/config"
)

// DeniedError is a request etcd's auth refused, told the way an operator
// fixes it: which key or prefix, as which user, and which permission the
// user's roles lack. etcd itself says only "permission denied".
type DeniedError struct {
	User string // the etcd user the request ran as; "" when unknown
	Op   string // "read" or "write"
	Key  string // the refused key, or the prefix (ending in "/") of a refused range
	// Of is the number of keys in the refused transaction when etcd could
	// not be asked which of them is refused; then Key is only the first.
	Of int
}

func (e *DeniedError) Error() string {
	what := "the read of " + e.Key
	if e.Op == "write" {
		what = "the write to " + e.Key
	}
	if e.Of > 1 {
		what += fmt.Sprintf(" (or another of the %d keys of one transaction)", e.Of)
	}
	who := "the client's user"
	if e.User != "" {
		who = fmt.Sprintf("user %q", e.User)
	}
	return fmt.Sprintf("etcd refused %s: %s has no %s permission there (etcd auth)", what, who, e.Op)
}

// Is makes errors.Is(err, rpctypes.ErrPermissionDenied) hold for the
// explained error as for etcd's own.
func (e *DeniedError) Is(target error) bool { return target == rpctypes.ErrPermissionDenied }

// IsDenied reports whether etcd's auth refused the request behind err: a
// missing grant, which no retry fixes until someone changes the roles.
func IsDenied(err error) bool { return errors.Is(err, rpctypes.ErrPermissionDenied) }

// User is the etcd user requests made with c run as: etcd.username with a
// password, else, with a client certificate, its common name (etcd's
// --client-cert-auth takes the CN as the user when no password login is
// made). "" when neither. A username without a password makes no login
// (tokensFor), so it is not the user, whatever it says.
func User(c config.Etcd) string {
	if c.Username != "" && c.Password != "" {
		return c.Username
	}
	if c.CertFile == "" {
		return ""
	}
	b, err := os.ReadFile(c.CertFile)
	if err != nil {
		return ""
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return ""
	}
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return ""
	}
	return cert.Subject.CommonName
}

// Denied explains a request that etcd refused with permission denied: it
// names the first of writes, then of reads, that user's roles do not
// cover. A transaction is refused as a whole, so only the grants tell
// which key it was; etcd lets a user read its own user and roles. When
// they cannot be read, the first key is named with the count.
func Denied(ctx context.Context, cli *clientv3.Client, user string, writes, reads []string) *DeniedError {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if perms, err := permissions(ctx, cli, user); err == nil {
		for _, k := range writes {
			if !covered(perms, k, authpb.WRITE) {
				return &DeniedError{User: user, Op: "write", Key: k}
			}
		}
		for _, k := range reads {
			if !covered(perms, k, authpb.READ) {
				return &DeniedError{User: user, Op: "read", Key: k}
			}
		}
	}
	if len(writes) > 0 {
		return &DeniedError{User: user, Op: "write", Key: writes[0], Of: len(writes)}
	}
	if len(reads) > 0 {
		return &DeniedError{User: user, Op: "read", Key: reads[0], Of: len(reads)}
	}
	return &DeniedError{User: user, Op: "read", Key: "?"}
}

func permissions(ctx context.Context, cli *clientv3.Client, user string) ([]*authpb.Permission, error) {
	if user == "" {
		return nil, errors.New("no user")
	}
	u, err := cli.UserGet(ctx, user)
	if err != nil {
		return nil, err
	}
	var perms []*authpb.Permission
	for _, r := range u.Roles {
		if r == "root" {
			return nil, errors.New("root is never refused")
		}
		rr, err := cli.RoleGet(ctx, r)
		if err != nil {
			return nil, err
		}
		perms = append(perms, rr.Perm...)
	}
	return perms, nil
}

// covered follows etcd's grants: an empty range end is the key alone,
// "\x00" every key from it on, anything else the half-open range.
func covered(perms []*authpb.Permission, key string, want authpb.Permission_Type) bool {
	for _, p := range perms {
		if p.PermType != want && p.PermType != authpb.READWRITE {
			continue
		}
		from, end := string(p.Key), string(p.RangeEnd)
		switch {
		case end == "":
			if key == from {
				return true
			}
		case end == "\x00":
			if key >= from {
				return true
			}
		case from <= key && key < end:
			return true
		}
	}
	return false
}
