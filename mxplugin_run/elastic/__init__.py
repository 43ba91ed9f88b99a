"""Elastic jobs, the launcher's side: the driver that starts worlds and
judges how they end (driver, world_end, rank_ends, world_record,
start_failures, cooldown), its service the ranks talk to (service), where
hosts come from (discovery), and what runs beside each rank on its host
(agent_requests, segments; the agent itself is mxplugin_run.rank_agent). The ranks' side is mxplugin.elastic."""
