-- forge_routing_attrition: the differential-attrition check of each randomized pair: Fisher's exact test of whether the
-- default and the alternative arm hold the same share of assignments with an outcome.
-- Inputs: forge_routing_srm (per pair: assigned, alternative_assigned, alternative_with_outcome, default_with_outcome).
-- Output: the columns of forge_routing_srm and attrition_p_value: given the pair's assignments per arm and its
-- assignments with an outcome (the table's margins), the hypergeometric probability of every split of those tasks
-- between the arms that is at most as likely as the split observed (two-sided, as R's fisher.test: a split whose
-- probability is within a factor 1 + 1e-7 of the observed one's counts as equally likely), at most 1. One row per pair,
-- in no particular order.
WITH pairs AS (
  SELECT *, row_number() OVER () AS pair_id,
         alternative_with_outcome + default_with_outcome AS with_outcome,
         assigned - alternative_assigned AS default_assigned
  FROM forge_routing_srm
),
support AS (  -- every split k (alternative assignments with an outcome) the margins allow
  SELECT pair_id, alternative_assigned, default_assigned, with_outcome, alternative_with_outcome,
         unnest(generate_series(greatest(0, with_outcome - default_assigned),
                                least(alternative_assigned, with_outcome))) AS k
  FROM pairs
),
weighted AS (  -- log P(k) up to the pair's constant: -ln(k! (a - k)! (m - k)! (d - m + k)!)
  SELECT pair_id, k = alternative_with_outcome AS observed,
         -(lgamma(k + 1) + lgamma(alternative_assigned - k + 1) + lgamma(with_outcome - k + 1)
           + lgamma(default_assigned - with_outcome + k + 1)) AS log_weight
  FROM support
),
scaled AS (
  SELECT pair_id, log_weight,
         max(log_weight) OVER pair AS top,
         max(CASE WHEN observed THEN log_weight END) OVER pair AS at_observed
  FROM weighted
  WINDOW pair AS (PARTITION BY pair_id)
),
tested AS (
  SELECT pair_id,
         least(1.0, fsum(CASE WHEN log_weight <= at_observed + ln(1 + 1e-7) THEN exp(log_weight - top) ELSE 0.0 END)
                    / fsum(exp(log_weight - top))) AS attrition_p_value  -- compensated sums: no order dependence
  FROM scaled
  GROUP BY pair_id
)
SELECT pairs.* EXCLUDE (pair_id, with_outcome, default_assigned), tested.attrition_p_value
FROM pairs JOIN tested USING (pair_id)
