"""What every flow runs on: settings, clients, Redis keys and scripts, MySQL, results, logs, traces."""
