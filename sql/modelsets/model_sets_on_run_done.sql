CREATE TRIGGER model_sets_on_run_done AFTER UPDATE OF status ON @extschema@.runs
    FOR EACH ROW WHEN (NEW.status = 'done' AND OLD.status IS DISTINCT FROM 'done')
    EXECUTE FUNCTION @extschema@._model_sets_run_done();
COMMENT ON TRIGGER model_sets_on_run_done ON @extschema@.runs IS
  'A run marked done makes its pending model set versions ready and active in that transaction (groupml.publish, train_groups(model_set => ...)).';
