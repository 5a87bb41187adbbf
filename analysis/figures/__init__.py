"""Figures, static (matplotlib) and interactive (plotly) twins side by side per topic, in one style
(style). Every function returns figures or axes; nothing here saves files."""
