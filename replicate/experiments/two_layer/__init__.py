"""Paper D ("What one cannot, two can"): one module per figure or table."""

from replicate.experiments import Experiment, entries

EXPERIMENTS: dict[str, Experiment] = entries(
    __name__,
    {
        "two_layer_data": ("data", "DataSettings", "data"),
        "two_layer_constructions": ("constructions", "ConstructionSettings", "constructions"),
        "two_layer_table1": ("table1", "Table1Settings", "table1"),
        "two_layer_gd": ("gd", "GDSettings", "gd"),
        "two_layer_maps": ("maps", "MapsSettings", "maps"),
        # derived from two_layer_maps (its trained models)
        "two_layer_fig1": ("fig1", "Fig1Settings", "fig1"),
        "two_layer_fig2": ("fig2", "Fig2Settings", "fig2"),
        "two_layer_table2": ("table2", "Table2Settings", "table2"),
        "two_layer_table3": ("table3", "NoiseSettings", "table3"),
        "two_layer_table4": ("table4", "NoiseSettings", "table4"),  # derived from table3
        "two_layer_bits": ("bits", "BitsSettings", "bits"),
        "two_layer_table_h5": ("table_h5", "TableH5Settings", "table_h5"),
    },
)
