package main

import (
	"io"

	"github.com/reconciler/reconciler/config"
)

// cmdConfig prints the effective configuration, secrets masked, with the
// source of each value (config.Describe). It opens no database.
func cmdConfig(args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := newFlagSet("config", stderr)
	cfgPath := fs.String("config", "", "config file (default $RECONCILER_CONFIG, else ./config.yaml)")
	output := fs.String("o", "yaml", "output: yaml (each value's source in a comment) or json ([{key, value, source}])")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := config.CheckFlagOneOf("-o", "output", *output, "yaml", "json"); err != nil {
		return err
	}
	cfg, err := loadConfig(*cfgPath, getenv)
	if err != nil {
		return err
	}
	return cfg.Write(stdout, *output)
}
