"""The UI's pages, one module per topic; each holds a `router` of `PageRoute`s."""
