# The threatexchange side of bench/hashmatch.ts: threatexchange 1.2.17's PDQIndex (faiss's binary
# multi-hash index, PDQMultiHashIndex, as HMA uses it) over the same hashes, the same queries, threshold
# 31. Prints one JSON line: build seconds, queries/s, the index's memory (RSS growth) and matches found.
import json
import resource
import sys
import time

from threatexchange.signal_type.pdq.pdq_index import PDQIndex

hashes_file, queries_file, budget = sys.argv[1], sys.argv[2], float(sys.argv[3])
hashes = open(hashes_file).read().split()
queries = open(queries_file).read().split()
rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started = time.perf_counter()
index = PDQIndex(entries=((h, i) for i, h in enumerate(hashes)))
built = time.perf_counter() - started
del hashes
rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
found = 0
done = 0
started = time.perf_counter()
cpu = time.process_time()
while done < len(queries) and (time.perf_counter() - started) < budget:
    found += len(index.query(queries[done]))
    done += 1
elapsed = time.perf_counter() - started
cpu = time.process_time() - cpu
print(json.dumps({"build_s": built, "qps": done / elapsed, "cpu_qps": done / cpu, "queries": done, "found": found, "rss_growth": (rss1 - rss0) * 1024}))
