"""The `runlane` commands, one module per topic; `runlane.cli.app` assembles them."""
