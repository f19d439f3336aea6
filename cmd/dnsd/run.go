package main

import (
	"context"
	"errors"

	"github.com/etcdns/etcdns/config"
)

func run(ctx context.Context, cfg *config.Config) error {
	return errors.New("serving is not built yet (issue 3)")
}
