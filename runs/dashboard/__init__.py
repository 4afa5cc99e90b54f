"""The dashboard: figures per period, the actionable parts, the hourly rollup, budget and capability usage."""
