-- model_family: the `model` argument of learn_over_groups. An enum has no collation, so a call
-- with a literal model name ('logistic') has no collation-dependent input and postgres_fdw can
-- ship the aggregate to the server of each foreign partition; a text literal's collation blocks it.
CREATE TYPE @extschema@.model_family AS ENUM
    ('lightgbm', 'lightgbm_regressor', 'linear', 'logistic', 'mlp', 'mlp_regressor', 'svm');
COMMENT ON TYPE @extschema@.model_family IS
  'The model families of learn_over_groups (its model argument). A text value converts implicitly. See groupml.help(''model_family'').';
