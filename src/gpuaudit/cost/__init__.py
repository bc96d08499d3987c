"""Layer 4: cost — the price catalog, pricing models, TCO, price-performance, recommendations."""
