"""The curated stores (one table, partitioned by store), the working memory and the raw journal."""
