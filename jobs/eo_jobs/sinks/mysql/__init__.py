"""MySQL and MariaDB sinks: a writer task's XA branch (``writer``); docs/mysql.md."""
