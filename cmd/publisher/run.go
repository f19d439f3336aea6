package main

import (
	"context"
	"errors"

	"github.com/etcdns/etcdns/config"
)

func run(ctx context.Context, cfg *config.Config) error {
	return errors.New("publishing is not built yet (issue 4)")
}
