package main

import (
	"github.com/spf13/cobra"

	"github.com/reconciler/reconciler/internal/cli"
	"github.com/reconciler/reconciler/internal/dbopen"
)

func (e env) migrateCmd() *cobra.Command {
	c := cli.Command(doc("migrate"), nil)
	fs := c.Flags()
	cfgPath := fs.String("config", "", "config file (default $RECONCILER_CONFIG, else ./config.yaml)")
	appTables := fs.Bool("app-tables", false, "first create the application's tables as the schema section names them, for a team starting fresh (an existing table is never altered)")
	c.RunE = func(c *cobra.Command, _ []string) error {
		ctx, stdout, stderr, getenv := c.Context(), e.stdout, e.stderr, e.getenv
		cfg, err := loadConfig(*cfgPath, getenv)
		if err != nil {
			return err
		}
		if *appTables {
			ctx = dbopen.SkipSchemaCheck(ctx) // the tables it creates are checked once they are there
		}
		db, _, closeDB, err := openDB(ctx, cfg, newLogger(cfg, stderr), false)
		if err != nil {
			return err
		}
		defer closeDB()
		return dbopen.Migrate(ctx, db, *appTables, stdout)
	}
	return c
}
