-- forge_routing_srm: the sample-ratio-mismatch counts of each randomized pair: how many of its assignments drew the
-- alternative, against how many the logged propensities expect, with Pearson's chi-square over the two cells, and how
-- many assignments of each arm have an outcome.
-- Inputs: forge_routing_assignments (the tasks assigned under a decision, each in its arm).
-- Output: tier, default_spec, alternative, assigned (the pair's paired assignments, every one, before any window),
-- alternative_assigned (those in the alternative arm), alternative_with_outcome and default_with_outcome (the
-- assignments of each arm whose attempt 1 passed or failed review, first_pass not null: the tasks the routing
-- comparison's first-pass rates average; the others never ran, were censored or are still running),
-- expected_alternative (the sum over the assignments of P(alternative): the propensity where the alternative was
-- chosen, else 1 - propensity), expected_default (assigned - expected_alternative, at least 0), chi_square (the sum
-- over both cells of (observed - expected)^2 / expected; a cell expecting 0 adds 0 when it observed 0 and infinity
-- when it observed more). forge_routing_attrition tests the outcome counts; the p-values and the flags are finished
-- in pipeline/forge/srm.py. One row per pair, in no particular order.
WITH paired AS (
  SELECT tier, default_spec, alternative,
         arm = 'alternative' AS drew_alternative,
         first_pass IS NOT NULL AS has_outcome,
         CASE WHEN arm = 'alternative' THEN propensity ELSE 1 - propensity END AS p_alternative
  FROM forge_routing_assignments
  WHERE paired
),
counted AS (
  SELECT tier, default_spec, alternative,
         count(*) AS assigned,
         count(*) FILTER (WHERE drew_alternative) AS alternative_assigned,
         count(*) FILTER (WHERE drew_alternative AND has_outcome) AS alternative_with_outcome,
         count(*) FILTER (WHERE NOT drew_alternative AND has_outcome) AS default_with_outcome,
         fsum(p_alternative) AS summed  -- compensated: the same total whatever order the rows come in
  FROM paired
  GROUP BY tier, default_spec, alternative
),
cells AS (
  SELECT tier, default_spec, alternative, assigned, alternative_assigned,
         alternative_with_outcome, default_with_outcome,
         assigned - alternative_assigned AS default_assigned,
         least(summed, assigned) AS expected_alternative,  -- each term is at most 1
         greatest(assigned - summed, 0.0) AS expected_default
  FROM counted
)
SELECT tier, default_spec, alternative, assigned, alternative_assigned, alternative_with_outcome, default_with_outcome,
       expected_alternative, expected_default,
       CASE WHEN expected_alternative > 0 THEN (alternative_assigned - expected_alternative) ** 2 / expected_alternative
            WHEN alternative_assigned = 0 THEN 0.0 ELSE 'inf'::DOUBLE END
     + CASE WHEN expected_default > 0 THEN (default_assigned - expected_default) ** 2 / expected_default
            WHEN default_assigned = 0 THEN 0.0 ELSE 'inf'::DOUBLE END AS chi_square
FROM cells
