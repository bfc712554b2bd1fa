package main

import (
	"github.com/spf13/cobra"

	"github.com/reconciler/reconciler/internal/cli"
)

// configCmd prints the effective configuration, secrets masked, with the
// source of each value (config.Describe). It opens no database.
func (e env) configCmd() *cobra.Command {
	c := cli.Command(doc("config"), nil)
	fs := c.Flags()
	cfgPath := fs.String("config", "", "config file (default $RECONCILER_CONFIG, else ./config.yaml)")
	var output string
	cli.OneOf(c, &output, "output", "o", "yaml", "output: yaml (each value's source in a comment) or json ([{key, value, source}])", "yaml", "json")
	c.RunE = func(c *cobra.Command, _ []string) error {
		stdout, getenv := e.stdout, e.getenv
		cfg, err := loadConfig(*cfgPath, getenv)
		if err != nil {
			return err
		}
		return cfg.Write(stdout, output)
	}
	return c
}
