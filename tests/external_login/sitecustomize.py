"""Every Python process the suite starts takes the login of a cluster the suite did not start
(``fleet_external_login``); on PYTHONPATH only while ``KAFKA_COMMAND_CONFIG`` is given."""

import fleet_external_login

fleet_external_login.install()
