package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/reconciler/reconciler/internal/cli"
	"github.com/reconciler/reconciler/models"
)

func (e env) migrateCmd() *cobra.Command {
	c := cli.Command(doc("migrate"), nil)
	fs := c.Flags()
	cfgPath := fs.String("config", "", "config file (default $RECONCILER_CONFIG, else ./config.yaml)")
	c.RunE = func(c *cobra.Command, _ []string) error {
		ctx, stdout, stderr, getenv := c.Context(), e.stdout, e.stderr, e.getenv
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
	return c
}
