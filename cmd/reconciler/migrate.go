package main

import (
	"context"
	"io"

	"github.com/reconciler/reconciler/internal/dbopen"
)

func cmdMigrate(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := newFlagSet("migrate", stderr)
	cfgPath := fs.String("config", "", "config file (default $RECONCILER_CONFIG, else ./config.yaml)")
	appTables := fs.Bool("app-tables", false, "first create the application's tables as the schema section names them, for a team starting fresh (an existing table is never altered)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
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
