"""Alerts: the launcher's rule evaluation, incidents and notifications (docs/alerts.md).

`engine.AlertEngine` is the loop; `targets` builds the notifiers of the catalog's `alerts:`
section; `stats.ALERT_STATS` holds the counters the metrics exporter reads; `health` is what
`status` and `doctor` say. (No re-exports here: the CLI imports `health` without httpx.)"""
