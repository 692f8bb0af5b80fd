-- The result of training and selecting a model for one group.
CREATE TYPE @extschema@.fit AS (
    status        text,     -- ok | too_small | single_class | no_rows | failed
    family        text,     -- model family: groupml.help('models')
    params        jsonb,    -- hyperparameters of the selected configuration
    metric        text,     -- validation metric the selection used
    score         float8,   -- value of that metric on the validation rows (natural units)
    metrics       jsonb,    -- every validation metric of the selected model
    n_train       bigint,   -- rows used for training
    n_validation  bigint,   -- rows held out for validation
    n_skipped     bigint,   -- rows skipped for a NULL label or a NULL/NaN/infinite feature
    n_features    integer,
    trials        jsonb,    -- one object per configuration tried: params, score, epochs, status
    message       text,     -- why status is not ok; a solver warning for an ok fit; else NULL
    model         bytea     -- the selected model in groupml's safe format (no pickle)
);
COMMENT ON TYPE @extschema@.fit IS
  'Result of groupml.learn_over_groups for one group: status, selected params, validation score, every trial, and the model (safe format). Use groupml.predict(fit, features).';
