-- Schema version 2: reports and queries rank individuals per generation.
CREATE INDEX individuals_by_generation ON individuals(experiment_id, generation, fitness DESC);
CREATE INDEX sample_results_by_position ON sample_results(evaluation_id, gold_position);
