-- forge_harvest_integrations: the integrations a survival harvest looks at — the user's branch advanced to a candidate — with their repository's path.
-- Inputs: forge_integrations, forge_repos.
-- Output: rid, run, repo, path (null when the repository id has no path), ts_unix, branch, parent, candidate,
-- target; by time, then rid (the seed's stable sort). One naming no candidate or no parent is counted, not measured.
SELECT i.rid, i.run, i.repo, r.path, i.ts_unix, i.branch, i.parent, i.candidate, i.target
FROM forge_integrations AS i
LEFT JOIN forge_repos AS r ON r.repo = i.repo
ORDER BY i.ts_unix, i.rid
