package main

import (
	"context"
	"fmt"
	"io"

	"github.com/reconciler/reconciler/models"
)

func cmdMigrate(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := newFlagSet("migrate", stderr)
	cfgPath := fs.String("config", "", "config file (default $RECONCILER_CONFIG, else ./config.yaml)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, err := loadConfig(*cfgPath, getenv)
	if err != nil {
		return err
	}
	db, _, closeDB, err := openDB(ctx, cfg, newLogger(cfg, stderr), false)
	if err != nil {
		return err
	}
	defer closeDB()
	applied, err := models.Migrate(ctx, db)
	if err != nil {
		return err
	}
	if len(applied) == 0 {
		fmt.Fprintln(stdout, "migrations: up to date")
	}
	for _, v := range applied {
		fmt.Fprintf(stdout, "migrations: applied %s\n", v)
	}
	return nil
}
