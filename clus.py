from scalable_softmax import experiments as ex
specs = [ex.RunSpec.make("eurlex-surrogate", "umax", 0.1, seed=s, epochs=2, monitor_rows=100, data_options={"scale": 0.05}) for s in (0, 1, 2)]
r = ex.run_all(specs, cache_dir="/tmp/w13/clus-cache", progress=False)
print([x.final["train_log_loss"] for x in r], [x.from_cache for x in r])
