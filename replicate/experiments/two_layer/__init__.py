"""Paper D ("What one cannot, two can"): one module per figure or table."""

from replicate.experiments.base import Experiment
from replicate.experiments.two_layer import (
    bits,
    constructions,
    data,
    fig1,
    fig2,
    gd,
    maps,
    table1,
    table2,
    table3,
    table4,
    table_h5,
)

EXPERIMENTS: dict[str, Experiment] = {
    "two_layer_data": Experiment(data.DataSettings, data.data),
    "two_layer_constructions": Experiment(
        constructions.ConstructionSettings, constructions.constructions
    ),
    "two_layer_table1": Experiment(table1.Table1Settings, table1.table1),
    "two_layer_gd": Experiment(gd.GDSettings, gd.gd),
    "two_layer_maps": Experiment(maps.MapsSettings, maps.maps),
    # derived from two_layer_maps (its trained models)
    "two_layer_fig1": Experiment(fig1.Fig1Settings, fig1.fig1),
    "two_layer_fig2": Experiment(fig2.Fig2Settings, fig2.fig2),
    "two_layer_table2": Experiment(table2.Table2Settings, table2.table2),
    "two_layer_table3": Experiment(table3.NoiseSettings, table3.table3),
    "two_layer_table4": Experiment(table3.NoiseSettings, table4.table4),  # derived from table3
    "two_layer_bits": Experiment(bits.BitsSettings, bits.bits),
    "two_layer_table_h5": Experiment(table_h5.TableH5Settings, table_h5.table_h5),
}
