"""Figures for the book: plain matplotlib, one function per picture, in one house style.

Every ``plot_*`` function returns a :class:`matplotlib.figure.Figure` in the style of
:mod:`vitbook.plotting.style`, released by pyplot, so Jupyter shows it once as a cell's last
value. Images are (C, H, W) floats in [0, 1]; patches are in row-major grid order.

See chapter: Images as sequences of patches.
"""

from vitbook.plotting.analysis import (
    plot_attention_distance,
    plot_filter_components,
    plot_layer_attention,
    plot_rollout_maps,
    plot_similarity_tiles,
)
from vitbook.plotting.attention import (
    plot_attention_map,
    plot_axial_reach,
    plot_query_weights,
)
from vitbook.plotting.blocks import (
    plot_activations,
    plot_gradient_through_depth,
    plot_norm_order,
    plot_norm_placement,
)
from vitbook.plotting.colour_attention import (
    plot_head_outputs,
    plot_weight_table,
)
from vitbook.plotting.cost import (
    plot_attention_cost,
    plot_attention_masks,
    plot_axial_crossover,
)
from vitbook.plotting.data_experiments import plot_data_hunger
from vitbook.plotting.distillation import plot_distance_by_setting, plot_distillation
from vitbook.plotting.experiments import (
    plot_patch_size_experiment,
    plot_position_experiment,
)
from vitbook.plotting.model import (
    plot_cost_by_part,
    plot_pipeline,
    plot_resampled_positions,
)
from vitbook.plotting.patches import (
    plot_patch_grid,
    plot_patch_vector,
)
from vitbook.plotting.photos import (
    plot_augmented,
    plot_ladder,
    plot_photo_confusion,
    plot_photo_mistakes,
    plot_photos_by_class,
    plot_time_to_accuracy,
)
from vitbook.plotting.positions import (
    plot_position_similarity,
    plot_shuffle_test,
    plot_sincos,
)
from vitbook.plotting.predictions import (
    plot_rollout_overlay,
    plot_top_classes,
)
from vitbook.plotting.softmax import plot_softmax_saturation
from vitbook.plotting.style import (
    COLUMN_WIDTH,
    CSS_PX_PER_INCH,
    MIN_FONT_SIZE,
    PNG_SCALE,
    STYLE,
    book_figure,
    new_figure,
    use_book_style,
)
from vitbook.plotting.training import (
    plot_confusion,
    plot_digits_by_class,
    plot_history,
    plot_lr_schedule,
    plot_predictions,
)
from vitbook.plotting.transfer import plot_transfer

__all__ = [
    "COLUMN_WIDTH",
    "CSS_PX_PER_INCH",
    "MIN_FONT_SIZE",
    "PNG_SCALE",
    "STYLE",
    "book_figure",
    "new_figure",
    "plot_activations",
    "plot_attention_cost",
    "plot_attention_distance",
    "plot_attention_map",
    "plot_attention_masks",
    "plot_augmented",
    "plot_axial_crossover",
    "plot_axial_reach",
    "plot_confusion",
    "plot_cost_by_part",
    "plot_data_hunger",
    "plot_distance_by_setting",
    "plot_distillation",
    "plot_digits_by_class",
    "plot_filter_components",
    "plot_gradient_through_depth",
    "plot_head_outputs",
    "plot_history",
    "plot_ladder",
    "plot_layer_attention",
    "plot_lr_schedule",
    "plot_norm_order",
    "plot_norm_placement",
    "plot_patch_grid",
    "plot_patch_size_experiment",
    "plot_patch_vector",
    "plot_pipeline",
    "plot_photo_confusion",
    "plot_photo_mistakes",
    "plot_photos_by_class",
    "plot_time_to_accuracy",
    "plot_position_experiment",
    "plot_position_similarity",
    "plot_predictions",
    "plot_query_weights",
    "plot_resampled_positions",
    "plot_rollout_maps",
    "plot_rollout_overlay",
    "plot_shuffle_test",
    "plot_similarity_tiles",
    "plot_sincos",
    "plot_softmax_saturation",
    "plot_top_classes",
    "plot_transfer",
    "plot_weight_table",
    "use_book_style",
]
