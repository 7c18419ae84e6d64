"""MySQL and MariaDB sinks: a writer task's XA branch (``writer``) and the sink contract
check (``contract``); docs/mysql.md."""
