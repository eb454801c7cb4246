"""Records as the engine sees them, over the storage seam: the curated stores (one table,
partitioned by store) with their heads in RAM, the working memory and the raw journal."""
